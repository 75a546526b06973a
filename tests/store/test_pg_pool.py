"""The store's connections on PostgreSQL: the process keeps those it opened under load (none closed as it comes back
to be opened again for the next request), and a read is its one statement, outside any transaction."""

import asyncio
import os

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
