"""Fakes of the services tenure talks to, for tests and benchmarks (never shipped).

Import from the modules themselves (`tests.fakes.openai_service`): this package imports
nothing, so that `python -m tests.fakes.openai_service` runs the module only once.
"""
