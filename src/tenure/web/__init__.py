"""tenure's web server (the `web` extra): a JSON API, an operator dashboard and /metrics.

    from tenure.web import create_app
    app = create_app(runtime, token=os.environ["TENURE_API_TOKEN"])

or `tenure serve`. See docs/web.md.
"""

from typing import Any

from tenure.web._app import WritesNeedToken, create_app
from tenure.web._metrics import Metrics, ObservedStore, instrument

__all__ = ["Metrics", "ObservedStore", "Tracing", "WritesNeedToken", "create_app", "instrument"]


def __getattr__(name: str) -> Any:
    # Tracing needs the otel extra: imported only when asked for.
    if name == "Tracing":
        from tenure.web._otel import Tracing

        return Tracing
    raise AttributeError(f"module 'tenure.web' has no attribute {name!r}")
