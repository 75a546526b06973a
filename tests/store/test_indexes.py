"""The indexes a new database gets: none that another index already serves (each is one more B-tree every save
writes), every one the reads need; a database made before keeps what it has."""

import asyncio
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from a2a_bridge.store.stores import StoreConfig, Stores

AGENT = "indexed"
TASKS, RECORDS = "tasks_indexed", "bridge_tasks"
OLD_INDEXES = {
    TASKS: [("ix_tasks_indexed_id", "id"), ("idx_tasks_indexed_owner_last_updated", "owner, last_updated")],
    RECORDS: [("ix_bridge_tasks_agent", "agent"), ("ix_bridge_tasks_claim_state", "claim_state")],
}
"""The four indexes a database made before this change has, which a new one lacks."""


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'indexes.db'}"
        return
    if not os.environ.get("A2A_BRIDGE_PG_URL") and os.environ.get("CI") != "true":
        pytest.skip("no PostgreSQL: run `export A2A_BRIDGE_PG_URL=$(bash .ci/postgres)`")
    yield request.getfixturevalue("pg_database")


async def started(url: str) -> Stores:
    """The stores of one agent on `url`, its tables and the ledger's made (as `serve` starts them)."""
    stores = Stores(StoreConfig.parse(url))
    stores.for_agent(AGENT)
    await stores.initialize()
    await stores.ledger().start_session(datetime.now(UTC))
    return stores


async def opened_indexes(url: str, made_before: bool = False) -> dict[str, dict[str, list[str]]]:
    """The indexes (name: columns) of an agent's task table and of the records once its stores have started; with
    `made_before`, on a database whose tables already have the four indexes."""
    stores = await started(url)
    try:
        assert stores.engine is not None
        if made_before:
            async with stores.engine.begin() as conn:
                for table, indexes in OLD_INDEXES.items():
                    for name, columns in indexes:
                        await conn.execute(text(f"CREATE INDEX {name} ON {table} ({columns})"))
            await stores.close()
            stores = await started(url)
            assert stores.engine is not None
        async with stores.engine.connect() as conn:
            return await conn.run_sync(
                lambda sync: {
                    table: {index["name"]: list(index["column_names"]) for index in inspect(sync).get_indexes(table)}
                    for table in (TASKS, RECORDS)
                }
            )
    finally:
        await stores.close()


def test_a_new_database_has_no_index_another_one_serves(url: str) -> None:
    indexes = asyncio.run(opened_indexes(url))
    tasks, records = indexes[TASKS], indexes[RECORDS]
    assert ["id"] not in tasks.values()
    assert "idx_tasks_indexed_owner_last_updated" not in tasks
    assert ["agent"] not in records.values()
    assert ["claim_state"] not in records.values()


def test_the_indexes_that_serve_them_are_there(url: str) -> None:
    indexes = asyncio.run(opened_indexes(url))
    assert indexes[TASKS]["ix_tasks_indexed_owner_updated_id"] == ["owner", "last_updated", "id"]
    assert indexes[RECORDS]["ix_bridge_tasks_overview"] == ["agent", "state", "claim_state"]
    assert indexes[RECORDS]["ix_bridge_tasks_lease"] == ["claim_state", "lease_until"]


def test_a_database_made_before_keeps_its_indexes(url: str) -> None:
    indexes = asyncio.run(opened_indexes(url, made_before=True))
    for table, made in OLD_INDEXES.items():
        for name, _columns in made:
            assert name in indexes[table]
