"""How a value reads to a person, on the command line and on the dashboard alike (pure)."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

# `password=secret` or `password='se cret'` in a key/value connection string.
_CONNINFO_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")


def without_password(url: str) -> str:
    """A database URL as it may be printed or logged: any password in it replaced by `***`.

    Banners and `tenure init` echo the URL the user gave, which on PostgreSQL often carries
    the password (`postgresql://app:secret@db/app`, `?password=`, or `password=` in a
    key/value string); logs and terminals are not where a secret belongs.
    """
    if "://" not in url:
        return _CONNINFO_PASSWORD.sub(r"\1***", url)
    parts = urlsplit(url)
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:***@{hostport}"
    query = parts.query
    if "password" in query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if k == "password" else v) for k, v in pairs], safe="*")
    if (netloc, query) == (parts.netloc, parts.query):
        return url  # rebuilt, `sqlite:///x.db` would lose a slash
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def span(seconds: float) -> str:
    """`45s`, `3m 20s`, `2h 5m`, `3d 4h`: a duration in its two largest units."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s" if s % 60 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m" if s % 3600 // 60 else f"{s // 3600}h"
    return f"{s // 86400}d {s % 86400 // 3600}h" if s % 86400 // 3600 else f"{s // 86400}d"
