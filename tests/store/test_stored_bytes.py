"""What a principal's tasks hold in the store (issue 31 item 3): each record keeps its task's stored bytes, written
with the record (saves, record-only writes and compare-and-set alike, and nothing by a fenced write), summed by owner
on every store; a database made before the column gains it and its index at start; `StoredBytes` reads the sum once
per refresh (longer where the sum takes long) and counts what was admitted since."""

import asyncio
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from a2a.types import TaskState

from a2a_bridge.core.auth import owner_context
from a2a_bridge.core.claims import Claim
from a2a_bridge.store.ledger import Fenced, MemoryLedger, TaskRecord
from a2a_bridge.store.stored_bytes import StoredBytes
from tests.store.test_ledger_contract import opened, store_url, task  # noqa: F401 - store_url is a fixture


def record(task_id: str, owner: str, version: int, stored: int) -> TaskRecord:
    return TaskRecord(
        task_id, "agent", owner, owner, datetime.now(UTC), "working", version, claim=Claim(state="claimed"),
        version=version, stored_bytes=stored,
    )


async def sums(url: str) -> None:
    async with opened(url) as (stores, ledger):
        store, _ = stores.for_agent("agent")
        await ledger.start_session(datetime.now(UTC))
        big, small, bobs = (str(uuid.uuid4()) for _ in range(3))
        working = TaskState.TASK_STATE_WORKING
        await ledger.save(store, task(big, working), owner_context("alice"), record(big, "alice", 1, 5000), [], new=True)
        await ledger.save(store, task(small, working), owner_context("alice"), record(small, "alice", 1, 70), [], new=True)
        await ledger.save(store, task(bobs, working), owner_context("bob"), record(bobs, "bob", 1, 900), [], new=True)
        assert (await ledger.stored_bytes("alice"), await ledger.stored_bytes("bob")) == (5070, 900)
        assert await ledger.stored_bytes("carol") == 0

        await ledger.save(store, task(big, working), owner_context("alice"), record(big, "alice", 2, 6000), [])
        assert await ledger.stored_bytes("alice") == 6070, "a task's bytes are replaced, not added"
        with pytest.raises(Fenced):
            await ledger.save(store, task(big, working), owner_context("alice"), record(big, "alice", 2, 99999), [])
        assert await ledger.stored_bytes("alice") == 6070, "a fenced write changes nothing"

        await ledger.put(record(big, "alice", 3, 6000), [])
        assert await ledger.put_if(record(big, "alice", 4, 6000), Claim(state="claimed"), [])
        assert await ledger.stored_bytes("alice") == 6070
        stored = await ledger.get(big)
        assert stored is not None and stored.stored_bytes == 6000 and stored.copy().stored_bytes == 6000


def test_each_owners_stored_bytes_are_the_sum_of_its_records(store_url: str) -> None:  # noqa: F811
    asyncio.run(sums(store_url))


async def reopen(path: Path) -> tuple[int, set[str]]:
    async with opened(f"sqlite:///{path}") as (stores, ledger):
        store, _ = stores.for_agent("agent")
        await ledger.start_session(datetime.now(UTC))
        fresh = str(uuid.uuid4())
        await ledger.save(store, task(fresh, TaskState.TASK_STATE_WORKING), owner_context("alice"),
                          record(fresh, "alice", 1, 300), [], new=True)
        total = await ledger.stored_bytes("alice")
    with sqlite3.connect(path) as db:
        indexes = {row[1] for row in db.execute("PRAGMA index_list(bridge_tasks)")}
    return total, indexes


def test_a_database_made_before_the_column_gains_it_and_its_index(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    asyncio.run(sums(f"sqlite:///{path}"))
    with sqlite3.connect(path) as db:
        db.execute("DROP INDEX ix_bridge_tasks_owner_bytes")
        db.execute("ALTER TABLE bridge_tasks DROP COLUMN stored_bytes")
    total, indexes = asyncio.run(reopen(path))
    assert total == 300, "the tasks stored before count 0 until written again; the new one counts"
    assert "ix_bridge_tasks_owner_bytes" in indexes


class CountingLedger(MemoryLedger):
    """A ledger whose sum is set by the test, counting its reads; each read takes `takes` seconds of `clock`."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self.clock = clock
        self.reads = 0
        self.stored = 0
        self.takes = 0.0

    async def stored_bytes(self, owner: str) -> int:
        self.reads += 1
        self.clock[0] += self.takes
        return self.stored


async def cached() -> None:
    now = [100.0]
    ledger = CountingLedger(now)
    stored = StoredBytes(ledger, refresh=1.0, now=lambda: now[0])
    ledger.stored = 1000
    assert await stored.total("alice") == 1000
    stored.add("alice", 50)
    ledger.stored = 1050
    assert await asyncio.gather(stored.total("alice"), stored.total("alice")) == [1050, 1050]
    assert ledger.reads == 1, "the sum is read once per refresh"
    now[0] += 1.0
    assert await stored.total("alice") == 1050, "what was admitted before the read is in the sum read"
    assert ledger.reads == 2
    await stored.total("bob")
    assert ledger.reads == 3, "each principal has its own sum"
    ledger.takes = 0.5
    now[0] += 1.0
    await stored.total("alice")
    now[0] += 5.0
    await stored.total("alice")
    assert ledger.reads == 4, "a sum that took 0.5 s is used for 10 s"
    now[0] += 5.0
    await stored.total("alice")
    assert ledger.reads == 5


def test_stored_bytes_are_read_once_per_refresh_with_what_was_admitted_since() -> None:
    asyncio.run(cached())
