"""Group commit: writes submitted together share one transaction, each writer waits for its own, a bad write fails
alone; and over the wire, a burst of concurrent sends on SQLite is all there after a restart."""

import asyncio
import concurrent.futures
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.server.tasks import DatabaseTaskStore
from a2a.types import Task, TaskState
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import event, inspect
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from a2a_bridge.core.auth import owner_context
from a2a_bridge.store.delivery_batch import Change
from a2a_bridge.store.group_commit import GroupCommit
from a2a_bridge.store.ledger_batch import Outcome, Remember, Save, SqliteBatch
from a2a_bridge.store.ledger_tables import task_row
from a2a_bridge.store.sql_ledger import SqlLedger
from a2a_bridge.store.stores import LARGE_BINDING, StoreConfig, Stores
from tests.store.test_ledger_contract import record, task
from tests.support import A2A, ServerProcess, rpc, user_message
from tests.store.test_proto_json import tasks

STORE = DatabaseTaskStore(create_async_engine("sqlite+aiosqlite://"))
"""Only its mapping `_to_orm` is used: nothing connects."""


class Recorder:
    """A fake store: records each batch; items equal to 'bad' fail the batch that holds them."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = asyncio.Event()

    async def write_many(self, items: list[str]) -> list[str]:
        self.batches.append(list(items))
        await self.gate.wait()
        if "bad" in items:
            raise ValueError("bad item")
        return [item.upper() for item in items]

    async def write_one(self, item: str) -> str:
        return (await self.write_many([item]))[0]


def test_writes_submitted_while_a_batch_runs_share_the_next_batch() -> None:
    asyncio.run(_test_writes_submitted_while_a_batch_runs_share_the_next_batch())


async def _test_writes_submitted_while_a_batch_runs_share_the_next_batch() -> None:
    store = Recorder()
    commit: GroupCommit[str, str] = GroupCommit(store.write_many, store.write_one)
    first = asyncio.ensure_future(commit.submit("a"))
    await asyncio.sleep(0)
    waiting = [asyncio.ensure_future(commit.submit(name)) for name in "bcd"]
    await asyncio.sleep(0)
    assert store.batches == [["a"]]
    assert not any(job.done() for job in [first, *waiting])
    store.gate.set()
    assert await first == "A"
    assert await asyncio.gather(*waiting) == ["B", "C", "D"]
    assert store.batches == [["a"], ["b", "c", "d"]]


def test_items_left_for_later_ride_with_the_next_batch_and_never_begin_one_alone() -> None:
    asyncio.run(_test_items_left_for_later_ride_with_the_next_batch_and_never_begin_one_alone())


async def _test_items_left_for_later_ride_with_the_next_batch_and_never_begin_one_alone() -> None:
    """An item left for later while a batch runs waits for the next item submitted, not for that batch's end (which
    would begin a transaction for it alone); with none submitted it is written once `linger` has passed."""
    store = Recorder()
    commit: GroupCommit[str, str] = GroupCommit(store.write_many, store.write_one, linger=3600.0)
    first = asyncio.ensure_future(commit.submit("a"))
    while not store.batches:
        await asyncio.sleep(0)
    left = commit.later("x")
    store.gate.set()
    assert await first == "A"
    for _ in range(10):
        await asyncio.sleep(0)
    assert store.batches == [["a"]] and not left.done(), "the batch's end began none for the later item"
    assert await commit.submit("b") == "B"
    assert await left == "X"
    assert store.batches == [["a"], ["x", "b"]]
    lingering: GroupCommit[str, str] = GroupCommit(store.write_many, store.write_one, linger=0.01)
    assert await asyncio.wait_for(lingering.later("y"), 5) == "Y"
    assert store.batches[-1] == ["y"]


def test_a_failing_write_fails_alone_and_the_others_commit() -> None:
    asyncio.run(_test_a_failing_write_fails_alone_and_the_others_commit())


async def _test_a_failing_write_fails_alone_and_the_others_commit() -> None:
    store = Recorder()
    store.gate.set()
    commit: GroupCommit[str, str] = GroupCommit(store.write_many, store.write_one)
    results = await asyncio.gather(*(commit.submit(item) for item in ["x", "bad", "y"]), return_exceptions=True)
    assert results[0] == "X" and results[2] == "Y"
    assert isinstance(results[1], ValueError)
    assert store.batches[0] == ["x", "bad", "y"]


def test_a_one_item_batch_that_fails_is_written_again_alone() -> None:
    asyncio.run(_test_a_one_item_batch_that_fails_is_written_again_alone())


async def _test_a_one_item_batch_that_fails_is_written_again_alone() -> None:
    """A lone write whose batch fails (another replica inserted the same message first) still gets `write_one`, which
    may answer it (from the row the other replica wrote)."""
    store = Recorder()
    store.gate.set()

    async def recovered(item: str) -> str:
        return f"recovered {item}"

    commit: GroupCommit[str, str] = GroupCommit(store.write_many, recovered)
    assert await commit.submit("bad") == "recovered bad"
    assert store.batches == [["bad"]]


def test_a_canceled_writer_does_not_stop_its_write() -> None:
    asyncio.run(_test_a_canceled_writer_does_not_stop_its_write())


async def _test_a_canceled_writer_does_not_stop_its_write() -> None:
    store = Recorder()
    commit: GroupCommit[str, str] = GroupCommit(store.write_many, store.write_one)
    job = asyncio.ensure_future(commit.submit("a"))
    await asyncio.sleep(0)
    job.cancel()
    store.gate.set()
    await commit.close()
    assert store.batches == [["a"]]
    with pytest.raises(asyncio.CancelledError):
        await job


def test_saves_submitted_together_on_sqlite_commit_in_one_transaction(tmp_path: Path) -> None:
    asyncio.run(_test_saves_submitted_together_on_sqlite_commit_in_one_transaction(tmp_path))


async def _test_saves_submitted_together_on_sqlite_commit_in_one_transaction(tmp_path: Path) -> None:
    """New tasks saved at once, then their ends (a large row among them): one commit each time (a batch commits in its
    own trip to the connection's thread, so SQLAlchemy's commits and the batches are counted), none written alone; the
    writer's connection that bound the large row is not used again."""
    stores = Stores(StoreConfig.parse(f"sqlite:///{tmp_path / 'batch.db'}"))
    store, _ = stores.for_agent("agent")
    await stores.initialize()
    ledger = stores.ledger()
    assert isinstance(ledger, SqlLedger) and stores.engine is not None
    owner = owner_context("alice")
    commits: list[int] = []
    connects: list[int] = []
    event.listen(stores.engine.sync_engine, "commit", lambda _conn: commits.append(1))
    event.listen(stores.engine.sync_engine, "connect", lambda _conn, _record: connects.append(1))

    class Counted(SqliteBatch):
        """The SQLite batch, each batch (one commit on the connection's thread) counted."""

        async def run(
            self, conn: AsyncConnection, saves: list[tuple[int, Save]], remembered: list[tuple[int, Remember]],
            results: list[Outcome], changes: list[tuple[int, Change]],
        ) -> set[tuple[str, bool]]:
            commits.append(1)
            return await super().run(conn, saves, remembered, results, changes)

    ledger._sqlite = Counted(stores.engine.dialect)
    alone: list[object] = []
    write_one = ledger._writes._write_one
    ledger._writes._write_one = lambda write: alone.append(write) or write_one(write)  # type: ignore[method-assign]
    try:
        await ledger.start_session(datetime.now(UTC))
        ids = [f"task-{index}" for index in range(8)]
        commits.clear()
        await asyncio.gather(*(
            ledger.save(store, task(i, TaskState.TASK_STATE_WORKING), owner, record(i, "claimed", 1), [], new=True)
            for i in ids
        ))
        assert (len(commits), alone) == (1, [])
        ended = [task(i, TaskState.TASK_STATE_COMPLETED) for i in ids]
        ended[0].metadata.update({"large": "x" * LARGE_BINDING})
        await asyncio.gather(*(
            ledger.save(store, t, owner, record(t.id, "completed", 2), [], log=[(2, "{}")]) for t in ended
        ))
        assert (len(commits), alone) == (2, [])
        for i in ids:
            found = await ledger.read(i, store, owner)
            assert found is not None and found[0].revision == 2 and found[1].status.state == TaskState.TASK_STATE_COMPLETED
        opened = len(connects)
        await ledger.put(record(ids[0], "completed", 3), [])
        assert len(connects) == opened + 1, "the connection that bound a large row was closed, a new one opened"
    finally:
        await ledger.close()
        await stores.close()


def test_a_batch_that_fails_on_sqlite_is_rolled_back_whole_before_its_writes_go_alone(tmp_path: Path) -> None:
    asyncio.run(_test_a_batch_that_fails_on_sqlite_is_rolled_back_whole_before_its_writes_go_alone(tmp_path))


async def _test_a_batch_that_fails_on_sqlite_is_rolled_back_whole_before_its_writes_go_alone(tmp_path: Path) -> None:
    """A batch whose last statement fails (an event-log row SQLite cannot bind: text with a lone surrogate, which has
    no UTF-8) leaves nothing of its earlier statements: the good save, written again alone, is stored as new (no
    TaskExists), the bad one fails alone."""
    stores = Stores(StoreConfig.parse(f"sqlite:///{tmp_path / 'rollback.db'}"))
    store, _ = stores.for_agent("agent")
    await stores.initialize()
    ledger = stores.ledger()
    assert isinstance(ledger, SqlLedger)
    owner = owner_context("alice")
    try:
        await ledger.start_session(datetime.now(UTC))
        good = ledger.save(store, task("good", TaskState.TASK_STATE_WORKING), owner, record("good", "claimed", 1), [], new=True)
        bad = ledger.save(store, task("bad", TaskState.TASK_STATE_WORKING), owner, record("bad", "claimed", 1), [], new=True,
                          log=[(1, "\ud800")])
        outcomes = await asyncio.gather(good, bad, return_exceptions=True)
        assert outcomes[0] is None
        assert isinstance(outcomes[1], UnicodeEncodeError), outcomes[1]
        found = await ledger.read("good", store, owner)
        assert found is not None and found[0].revision == 1
        assert await ledger.read("bad", store, owner) is None
        async with stores.engine.connect() as conn:  # type: ignore[union-attr]
            raw = await conn.get_raw_connection()
            assert not raw.driver_connection.in_transaction  # type: ignore[union-attr]
    finally:
        await ledger.close()
        await stores.close()


def send(server: ServerProcess, index: int) -> dict[str, Any]:
    return rpc(server.agent("bench"), "SendMessage", {"message": user_message("hello", f"burst-{index}")}, rpc_id=index)


def test_a_burst_of_concurrent_sends_on_sqlite_is_all_there_after_a_crash(tmp_path: Path) -> None:
    """Every answered send was committed: the server is killed (SIGKILL) right after the burst."""
    server = ServerProcess(f"sqlite:///{tmp_path / 'burst.db'}", extra=["--agent", "bench"]).start()
    try:
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda index: send(server, index), range(64)))
        answered = {answer["result"]["task"]["id"]: answer["result"]["task"] for answer in answers}
        assert len(answered) == 64
        assert {task["status"]["state"] for task in answered.values()} == {"TASK_STATE_COMPLETED"}
        server.kill()
        server.start()
        assert send(server, 7)["result"]["task"]["id"] == answers[7]["result"]["task"]["id"]
        for task_id, task in answered.items():
            stored = rpc(server.agent("bench"), "GetTask", {"id": task_id})
            assert stored["result"]["artifacts"] == task["artifacts"], json.dumps(stored)[:300]
            assert stored["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
            status = httpx.get(f"{server.agent('bench')}/tasks/{task_id}/status", headers=A2A, timeout=10)
            assert status.json()["status"]["phase"] == "terminal"
    finally:
        server.stop()


@settings(max_examples=200, deadline=None)
@given(tasks(), st.text(max_size=8))
def test_the_task_row_is_the_sdk_stores_own_mapping(task: Task, owner: str) -> None:
    """The ledger writes the SDK's task table itself; its row must be what the SDK's `_to_orm` maps the task to."""
    model = STORE._to_orm(task, owner)
    expected = {attribute.columns[0].key: getattr(model, attribute.key) for attribute in inspect(type(model)).column_attrs}
    assert task_row(task, owner) == expected


def test_the_bytes_a_batch_binds_are_counted_as_each_value_counts() -> None:
    """`Compiled.bytes_bound` sums the text and binary values of the sized columns: the same count whether every such
    value is text, binary or None (counted in C) or one is not (counted one value at a time)."""
    from sqlalchemy import insert
    from sqlalchemy.dialects import sqlite

    from a2a_bridge.store.ledger_batch import Compiled
    from a2a_bridge.store.ledger_tables import claim_events_table, messages_table

    def counted(compiled: Compiled, bound: list[list[Any]]) -> int:
        return sum(len(values[index]) for values in bound for index in compiled._sized
                   if isinstance(values[index], str | bytes))

    messages = Compiled(insert(messages_table), messages_table, sqlite.dialect())
    rows = [
        {"agent": "a", "owner": "o" * 70, "message_id": "m", "fingerprint": "f" * 64, "task_id": None, "reply": r,
         "session": 3}
        for r in (None, "", '{"x": "é"}', "r" * 5000)
    ]
    bound = [messages.bind(row) for row in rows]
    assert messages.bytes_bound(bound) == counted(messages, bound) > 5000
    bound[0][messages._sized[0]] = 12345
    assert messages.bytes_bound(bound) == counted(messages, bound)
    events = Compiled(insert(claim_events_table), claim_events_table, sqlite.dialect(), ["task_id", "claim_generation", "operation", "state", "evidence", "at"])
    rows = [{"task_id": "t", "claim_generation": 1, "operation": "claim", "state": "claimed", "evidence": {"k": "v" * 99},
             "at": datetime.now(UTC)}]
    bound = [events.bind(row) for row in rows]
    assert events.bytes_bound(bound) == counted(events, bound) > 99


def test_datetimes_are_bound_in_sqlites_own_storage_text() -> None:
    """`datetime_text` writes a datetime as the SQLite dialect's DATETIME processor does (the wall-clock fields, no
    offset), aware or naive, at the ends of the range, with and without microseconds; other values go to it too."""
    from datetime import timedelta, timezone

    from sqlalchemy.dialects import sqlite

    from a2a_bridge.store.ledger_batch import datetime_text

    dialect = sqlite.dialect()
    impl = sqlite.DATETIME()
    process = impl.bind_processor(dialect)
    fast = datetime_text(impl, process)
    assert fast is not None and fast is not process
    values = [
        datetime(2026, 12, 2, 6, 41, 40, 123456, tzinfo=UTC), datetime(2026, 12, 2, 6, 41, 40, tzinfo=UTC),
        datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-11))),
        datetime(999, 3, 4, 5, 6, 7, 8, tzinfo=timezone(timedelta(hours=5, minutes=30))), None,
    ]
    for value in values:
        assert fast(value) == process(value), value
    second = datetime(2026, 12, 2, 6, 41, 40, tzinfo=UTC)
    for value in [second, second.replace(microsecond=7), second.replace(second=41), second, datetime(2026, 12, 2, 6, 41, 40)]:
        assert fast(value) == process(value), value


def test_json_values_written_as_their_text_are_bound_as_that_text() -> None:
    """`json_text` binds a `JsonText` as its text, as the JSON processor does through `column_json`, and every other
    value through the processor; a dialect whose JSON is not `column_json`'s keeps its processor."""
    from sqlalchemy import JSON as JsonType
    from sqlalchemy.dialects import sqlite

    from a2a_bridge.store.column_json import JsonText, column_json
    from a2a_bridge.store.ledger_batch import json_text

    dialect = sqlite.dialect(json_serializer=column_json)
    impl = JsonType().dialect_impl(dialect)
    process = impl.bind_processor(dialect)
    fast = json_text(impl, process, dialect)
    assert fast is not None and fast is not process
    for value in [JsonText('[{"a":1}]'), {"b": [1, None]}, None, "text", [1.5, "x"]]:
        assert fast(value) == process(value), value
    plain = sqlite.dialect()
    kept = impl.bind_processor(plain)
    assert json_text(impl, kept, plain) is kept
    assert json_text(impl, None, dialect) is None
