"""Property-based: every operation of the OpenAPI schema, fed input that schemathesis
generates from the schema, with and without the token, answers without a server error."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from tenure.web import create_app

from .conftest import AUTH, TOKEN, make_runtime, seed

EXAMPLES = 30


@pytest.mark.slow
def test_no_operation_answers_with_a_server_error(db_url: str) -> None:
    # On each store: PostgreSQL refuses text that SQLite takes (NUL, lone surrogates).
    runtime = make_runtime(db_url)
    try:
        seed(runtime)
        schema = schemathesis.openapi.from_asgi(
            "/api/openapi.json", create_app(runtime, token=TOKEN)
        )
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 12
        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def answers(case: Any) -> None:
                case.call_and_validate(headers=AUTH, checks=[not_a_server_error])
                case.call_and_validate(checks=[not_a_server_error])

            answers()
    finally:
        runtime.close()
