"""tenure's web server (the `web` extra): a JSON API, an operator dashboard and /metrics.

    from tenure.web import create_app
    app = create_app(runtime, token=os.environ["TENURE_API_TOKEN"])

or `tenure serve`. See docs/web.md.
"""

from tenure.web._app import WritesNeedToken, create_app
from tenure.web._metrics import Metrics, ObservedStore, instrument

__all__ = ["Metrics", "ObservedStore", "WritesNeedToken", "create_app", "instrument"]
