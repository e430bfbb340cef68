"""Suite-wide fixtures and the backend report.

Tests that take `database_url` (or fixtures built on it) run once per backend in
tests/backends.py. At the end the run prints how many ran on PostgreSQL; when
GATEWAY_TEST_REQUIRE_BACKENDS=1 (set by .ci/run) zero is a failure, as is a missing URL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.migrate import migrate
from storage.open import Storage, open_database
from tests.backends import BACKENDS, POSTGRES_URL, REDIS_URL, REQUIRE, fresh_database_url
from tests.harness import Gateway, gateway_config, running_gateway

_ran_on_postgres: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if REQUIRE and not (POSTGRES_URL and REDIS_URL):
        raise pytest.UsageError(
            "GATEWAY_TEST_REQUIRE_BACKENDS=1 needs GATEWAY_TEST_DATABASE_URL and "
            "GATEWAY_TEST_REDIS_URL"
        )


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def database_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    async with fresh_database_url(backend, tmp_path) as url:
        yield url


@pytest.fixture
async def storage(database_url: str) -> AsyncIterator[Storage]:
    async with open_database(database_url) as db:
        await migrate(db)
        yield Storage.over(db)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    callspec = getattr(item, "callspec", None)
    if (
        report.when == "call"
        and report.passed
        and callspec is not None
        and callspec.params.get("backend") == "postgresql"
    ):
        _ran_on_postgres.append(item.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line(
        f"storage backends: {', '.join(BACKENDS)}; tests passed on PostgreSQL: "
        f"{len(_ran_on_postgres)}"
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if REQUIRE and not _ran_on_postgres and exitstatus == 0:
        session.exitstatus = 1


@pytest.fixture
async def gateway(database_url: str, tmp_path: Path) -> AsyncIterator[Gateway]:
    async with running_gateway(gateway_config(database_url, tmp_path)) as gw:
        yield gw
