"""The loopback model server of tests/providers, for the integrations' tests."""

from tests.providers.conftest import chat_server, endpoint, make_provider

__all__ = ["chat_server", "endpoint", "make_provider"]
