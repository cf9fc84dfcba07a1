"""Who may read and who may write.

The API takes `Authorization: Bearer $TENURE_API_TOKEN` (compared in constant time). A
browser logs in once with the same token and gets a session cookie instead; the cookie is
only ever accepted for reads and for the dashboard's own forms, and every such form carries
a CSRF token bound to the browser's nonce cookie, so another site can neither read nor post
on the operator's behalf (the cookies are also SameSite=Strict and HttpOnly).

Nothing is stored on the server: the session and CSRF values are HMACs of the browser's
nonce under a key derived from the API token, so they survive a restart and die with a
rotated token.

`tenure serve` answers only requests whose `Host` is a name it serves (the bound host,
`localhost`, names given with `--allowed-host`) or an IP address. DNS rebinding points a
name the attacker owns at this server, so that the attacker's page is same-origin with it
and may read what `--public-read` serves; such a request carries the attacker's name in
`Host` and is refused. An IP address is always accepted: a page is same-origin with an IP
address only when it was loaded from it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from fastapi import HTTPException, Request
from starlette.types import ASGIApp, Receive, Scope, Send

NONCE_COOKIE = "tenure_nonce"
SESSION_COOKIE = "tenure_session"
CSRF_FIELD = "csrf"
# An operator's name, for the audit log and decisions, is kept this short.
MAX_ACTOR = 80


class NotAuthenticated(HTTPException):
    def __init__(self, detail: str = "a bearer token is required") -> None:
        super().__init__(401, detail, headers={"WWW-Authenticate": "Bearer"})


class Forbidden(HTTPException):
    def __init__(self, detail: str) -> None:
        super().__init__(403, detail)


@dataclass(frozen=True)
class Caller:
    """Who made a request: a token holder (API or logged-in browser) or an anonymous reader."""

    authenticated: bool
    actor: str
    via: str  # "token", "session" or "public"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class Security:
    def __init__(self, token: str | None, *, public_read: bool) -> None:
        self.token = token or None
        self.public_read = public_read
        seed = self.token.encode() if self.token else secrets.token_bytes(32)
        self._key = hashlib.sha256(b"tenure-web-session\x00" + seed).digest()

    @property
    def writes_enabled(self) -> bool:
        return self.token is not None

    # -- tokens --------------------------------------------------------------------------

    def bearer_ok(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if self.token is None or scheme.lower() != "bearer" or not value:
            return False
        return hmac.compare_digest(value.strip().encode(), self.token.encode())

    def token_ok(self, candidate: str) -> bool:
        if self.token is None:
            return False
        return hmac.compare_digest(candidate.strip().encode(), self.token.encode())

    def _mac(self, purpose: str, value: str) -> str:
        return _b64(hmac.new(self._key, f"{purpose}\x00{value}".encode(), "sha256").digest())

    # -- the browser's nonce, session and CSRF token ---------------------------------------

    @staticmethod
    def new_nonce() -> str:
        return _b64(secrets.token_bytes(18))

    @staticmethod
    def nonce_of(request: Request) -> str | None:
        nonce = request.cookies.get(NONCE_COOKIE)
        return nonce if nonce and 16 <= len(nonce) <= 64 and nonce.isascii() else None

    def csrf_token(self, nonce: str) -> str:
        return self._mac("csrf", nonce)

    def session_value(self, nonce: str, actor: str) -> str:
        name = _b64(actor.encode())
        return f"{name}.{self._mac('session', nonce + '.' + name)}"

    def session_actor(self, request: Request) -> str | None:
        """The operator's name if the session cookie is valid for this browser's nonce."""
        nonce = self.nonce_of(request)
        value = request.cookies.get(SESSION_COOKIE, "")
        name, _, mac = value.partition(".")
        if self.token is None or nonce is None or not mac:
            return None
        if not hmac.compare_digest(mac.encode(), self._mac("session", nonce + "." + name).encode()):
            return None
        try:
            padded = name + "=" * (-len(name) % 4)
            return base64.urlsafe_b64decode(padded.encode()).decode()[:MAX_ACTOR] or "operator"
        except (ValueError, UnicodeDecodeError):
            return None

    def check_csrf(self, request: Request, submitted: str | None) -> None:
        """A dashboard form: same-origin, and its CSRF token matches this browser's nonce."""
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            raise Forbidden("cross-site form submissions are refused")
        origin = request.headers.get("origin")
        if origin is not None and origin != "null":
            expected = f"{request.url.scheme}://{request.headers.get('host', '')}"
            if origin != expected:
                raise Forbidden("cross-origin form submissions are refused")
        nonce = self.nonce_of(request)
        if nonce is None or not submitted:
            raise Forbidden("the form has expired: reload the page and try again")
        if not hmac.compare_digest(submitted.encode(), self.csrf_token(nonce).encode()):
            raise Forbidden("the form has expired: reload the page and try again")

    # -- who is asking -----------------------------------------------------------------------

    def caller(self, request: Request) -> Caller:
        if self.bearer_ok(request):
            actor = request.headers.get("x-tenure-actor", "").strip()[:MAX_ACTOR]
            return Caller(True, actor or "api", "token")
        name = self.session_actor(request)
        if name is not None:
            return Caller(True, name, "session")
        return Caller(False, "anonymous", "public")

    @staticmethod
    def refused(request: Request) -> NotAuthenticated:
        """Why a request is not authenticated: a token that was sent and is wrong is told
        apart from none at all (a typo is not a missing header)."""
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return NotAuthenticated("the bearer token is not the API token")
        if scheme:
            return NotAuthenticated("expected 'Authorization: Bearer TOKEN'")
        return NotAuthenticated()

    def reader(self, request: Request) -> Caller:
        """The caller of an API read: anyone with --public-read, else a token holder."""
        caller = self.caller(request)
        if not caller.authenticated and not self.public_read:
            raise self.refused(request)
        return caller

    def writer(self, request: Request) -> Caller:
        """The caller of an API write: a bearer token only (a cookie never authorizes a
        write through the API, so no other site can make a browser do one)."""
        if self.token is None:
            raise Forbidden("writes are disabled: the server was started without TENURE_API_TOKEN")
        if not self.bearer_ok(request):
            raise self.refused(request)
        return self.caller(request)

    def revealer(self, request: Request) -> Caller:
        """`?reveal=true`: content is shown to token holders only, even with --public-read."""
        caller = self.caller(request)
        if not caller.authenticated:
            if request.headers.get("authorization"):
                raise self.refused(request)
            raise NotAuthenticated("reveal=true needs a token")
        return caller


# -- the Host header ---------------------------------------------------------------------

LOOPBACK_NAMES = ("localhost",)
WILDCARD_ADDRESSES = ("", "0.0.0.0", "::")


def served_hosts(bound: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names a server bound to `bound` answers to (IP addresses always pass)."""
    names = {bound, *LOOPBACK_NAMES, *extra}
    if bound in WILDCARD_ADDRESSES:  # every interface: the machine's own names too
        names |= {socket.gethostname(), socket.getfqdn()}
    return frozenset(n.strip().lower().rstrip(".") for n in names if n.strip())


def host_name(header: str) -> str | None:
    """The name of a `Host` header without its port (None when it is malformed)."""
    header = header.strip().lower()
    if header.startswith("["):  # [::1]:8000
        name, bracket, _ = header[1:].partition("]")
        return name if bracket else None
    name, _, port = header.partition(":")
    if not name or (port and not port.isdigit()):
        return None
    return name.rstrip(".")


def host_allowed(header: str, allowed: frozenset[str]) -> bool:
    name = host_name(header)
    if name is None:
        return False
    if name in allowed:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostCheck:
    """Refuse, before anything else runs, a request whose `Host` this server does not serve."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = dict(scope.get("headers") or [])
            host = headers.get(b"host", b"").decode("latin-1")
            if not host_allowed(host, self.allowed):
                await self._refuse(host, send)
                return
        await self.app(scope, receive, send)

    async def _refuse(self, host: str, send: Send) -> None:
        shown = host[:80] or "(none)"
        body = (
            f"unknown Host {shown!r}: this server answers to {', '.join(sorted(self.allowed))} "
            "and IP addresses (add a name with --allowed-host)\n"
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 400,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
