"""Which PostgreSQL errors fail at once (waiting cannot heal them) and which are retried."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors

from tenure.store._pg_conn import is_permanent, one_line


@pytest.mark.parametrize(
    "exc",
    [
        errors.InvalidCatalogName("database x does not exist"),
        errors.InvalidPassword("password authentication failed"),
        errors.InvalidAuthorizationSpecification("role x is not permitted to log in"),
        psycopg.OperationalError(
            'connection failed: FATAL:  password authentication failed for user "tenure"'
        ),
        psycopg.OperationalError('connection failed: FATAL:  database "nope" does not exist'),
        psycopg.OperationalError('could not translate host name "db" to address'),
        psycopg.OperationalError("failed to resolve host 'db': [Errno -2] Name or service"),
    ],
)
def test_errors_that_cannot_heal(exc: Exception) -> None:
    assert is_permanent(exc)


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.OperationalError("connection failed: Connection refused"),
        psycopg.OperationalError("server closed the connection unexpectedly"),
        errors.AdminShutdown("terminating connection due to administrator command"),
        errors.SerializationFailure("could not serialize access"),
        errors.CannotConnectNow("the database system is starting up"),
    ],
)
def test_errors_that_can_heal(exc: Exception) -> None:
    assert not is_permanent(exc)


def test_one_line_joins_and_drops_repeats() -> None:
    exc = psycopg.OperationalError(
        "connection failed: refused\n    Is the server running?\nconnection failed: refused\n"
    )
    assert one_line(exc) == "connection failed: refused; Is the server running?"
