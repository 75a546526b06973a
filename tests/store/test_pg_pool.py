"""The store's connections on PostgreSQL: the process keeps those it opened under load (none closed as it comes back
to be opened again for the next request), a read is its one statement, outside any transaction, and a transaction
left open by a paused process is ended by PostgreSQL, its locks freed."""

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text

from a2a_bridge.store.stores import PG_POOL, StoreConfig, Stores

AT_ONCE = 12
"""Connections in use at once: more than SQLAlchemy's default pool keeps (5)."""


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    if not os.environ.get("A2A_BRIDGE_PG_URL") and os.environ.get("CI") != "true":
        pytest.skip("no PostgreSQL: run `export A2A_BRIDGE_PG_URL=$(bash .ci/postgres)`")
    return str(request.getfixturevalue("pg_database"))


async def kept_and_opened(url: str) -> tuple[int, int]:
    """After AT_ONCE reads at once and AT_ONCE more: connections the pool keeps, and backends the database had."""
    stores = Stores(StoreConfig.parse(url))
    assert stores.engine is not None and stores.reader is not None
    release = asyncio.Event()

    async def read() -> None:
        async with stores.reader.connect() as conn:  # type: ignore[union-attr]
            await conn.execute(text("SELECT 1"))
            await release.wait()

    try:
        for _ in range(2):
            release.clear()
            readers = [asyncio.ensure_future(read()) for _ in range(AT_ONCE)]
            await asyncio.sleep(0)
            while stores.engine.pool.checkedout() < AT_ONCE:  # type: ignore[attr-defined]
                await asyncio.sleep(0.01)
            release.set()
            await asyncio.gather(*readers)
        async with stores.engine.connect() as conn:
            sessions = (await conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"))).scalar_one()
        return stores.engine.pool.checkedin(), int(sessions)  # type: ignore[attr-defined]
    finally:
        await stores.close()


def test_connections_opened_under_load_are_kept_for_the_next_requests(pg_url: str) -> None:
    kept, backends = asyncio.run(asyncio.wait_for(kept_and_opened(pg_url), 30))
    assert PG_POOL["pool_size"] >= AT_ONCE
    assert kept == AT_ONCE, "every connection the reads opened is kept, none closed on its return"
    assert backends == AT_ONCE


async def in_transaction_after_read(url: str) -> bool:
    stores = Stores(StoreConfig.parse(url))
    assert stores.reader is not None
    try:
        async with stores.reader.connect() as conn:
            assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
            raw = await conn.get_raw_connection()
            return bool(raw.driver_connection.is_in_transaction())  # type: ignore[union-attr]
    finally:
        await stores.close()


def test_a_read_is_one_statement_without_a_transaction_around_it(pg_url: str) -> None:
    assert asyncio.run(in_transaction_after_read(pg_url)) is False


PAUSED = """
import asyncio, dataclasses, os, signal, sys
from sqlalchemy import text
from a2a_bridge.store.stores import StoreConfig, Stores

async def main() -> None:
    stores = Stores(dataclasses.replace(StoreConfig.parse(sys.argv[1]), idle_in_transaction=float(sys.argv[2])))
    try:
        async with stores.engine.connect() as conn:
            await conn.execute(text("UPDATE paused SET n = n + 1 WHERE id = 1"))
            print("locked", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
            await conn.commit()
        print("committed", flush=True)
    except Exception as error:
        print("ended:", type(error).__name__, flush=True)
    finally:
        await stores.close()

asyncio.run(main())
"""
"""A process that updates a row inside a transaction, stops itself (SIGSTOP) before committing, and says on waking
whether its commit went through."""
IDLE = 1.0
"""The paused process's `idle_in_transaction`: seconds before PostgreSQL ends its open transaction."""


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


async def paused_in_transaction(url: str) -> tuple[float, str, int]:
    """Seconds another connection's update of the row waited, what the paused process said on waking, the row."""
    admin = await asyncpg.connect(url)
    child: subprocess.Popen[str] | None = None
    try:
        await admin.execute("CREATE TABLE paused (id int PRIMARY KEY, n int NOT NULL); INSERT INTO paused VALUES (1, 0)")
        child = subprocess.Popen([sys.executable, "-c", PAUSED, url, str(IDLE)], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        assert await asyncio.to_thread(child.stdout.readline) == "locked\n"
        deadline = time.monotonic() + 10
        while not stopped(child.pid):
            assert time.monotonic() < deadline, "the process did not stop"
            await asyncio.sleep(0.01)
        started = time.monotonic()
        try:
            await asyncio.wait_for(admin.execute("UPDATE paused SET n = n + 10 WHERE id = 1"), 8 * IDLE)
        except TimeoutError:
            return float("inf"), "", -1
        waited = time.monotonic() - started
        child.send_signal(signal.SIGCONT)
        said, _ = await asyncio.to_thread(child.communicate, timeout=30)
        return waited, said.strip(), int(await admin.fetchval("SELECT n FROM paused WHERE id = 1"))
    finally:
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGCONT)
            child.kill()
            child.wait()
        await admin.close()


def test_a_transaction_left_open_by_a_paused_process_is_ended_and_its_row_locks_freed(pg_url: str) -> None:
    """A replica paused (SIGSTOP) inside a transaction holds its row locks only until PostgreSQL ends its session
    (`idle_in_transaction`): another connection's write of the row waits about that long, not until the paused one
    wakes; the paused one's write is rolled back and its commit fails when it wakes."""
    waited, said, n = asyncio.run(paused_in_transaction(pg_url))
    assert waited < 8 * IDLE, "the update waited on the paused process's lock until it woke"
    assert said.startswith("ended:"), f"the paused process's commit went through: {said!r}"
    assert n == 10, "only the live connection's update stands"
