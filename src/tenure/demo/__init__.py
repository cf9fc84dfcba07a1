"""The built-in demo: `tenure.demo:app` (the default app of the `tenure` command) and
`tenure demo`, which runs a few hundred scripted runs through two worker processes, kills
one of them mid-run and audits the result.
"""

from tenure.demo._app import app, check

__all__ = ["app", "check"]
