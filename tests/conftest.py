import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.support import LOOPBACK_WEBHOOKS, SHARED, ServerProcess, libfaketime


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A bridge on a fresh SQLite file, shared by the tests that only read or create their own tasks; webhooks may
    reach the kit tests' receiver on 127.0.0.1."""
    db = tmp_path_factory.mktemp("store") / "bridge.db"
    process = ServerProcess(f"sqlite:///{db}", extra=LOOPBACK_WEBHOOKS).start()
    yield process
    process.stop()


@pytest.fixture
def kit() -> Path:
    """The capture kit's transcripts; tests that compare against them skip where ../shared is absent."""
    path = SHARED / "kit"
    if not path.is_dir():
        pytest.skip("../shared/kit is not beside the repository")
    return path


def pg_server_url() -> str:
    url = os.environ.get("A2A_BRIDGE_PG_URL")
    if not url:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must provide PostgreSQL: .ci/run sets A2A_BRIDGE_PG_URL")
        pytest.skip("no PostgreSQL: run `export A2A_BRIDGE_PG_URL=$(bash .ci/postgres)`")
    return url


@contextlib.contextmanager
def fresh_pg_database() -> Iterator[str]:
    """A fresh database on the test PostgreSQL server, dropped afterwards."""
    server = pg_server_url()
    name = f"bridge_{uuid.uuid4().hex[:12]}"

    async def admin(statement: str) -> None:
        connection = await asyncpg.connect(server)
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(admin(f"CREATE DATABASE {name}"))
    try:
        yield server.rsplit("/", 1)[0] + f"/{name}"
    finally:
        asyncio.run(admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture
def pg_database() -> Iterator[str]:
    """A fresh database on the test PostgreSQL server, dropped afterwards."""
    with fresh_pg_database() as url:
        yield url


@pytest.fixture(scope="module")
def pg_module_database() -> Iterator[str]:
    """A fresh database on the test PostgreSQL server shared by one module's tests, dropped after them."""
    with fresh_pg_database() as url:
        yield url


@pytest.fixture
def faketime_preload() -> str:
    """The LD_PRELOAD value that loads libfaketime (a server's clock moved by FAKETIME); CI must have it."""
    found = libfaketime()
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must provide libfaketime: .ci/run installs Debian's faketime")
        pytest.skip("no libfaketime: install Debian's faketime package")
    return found
