"""The ledger's group commit on PostgreSQL (`pg_batch.PgBatch`): the whole batch goes to asyncpg, none of it through
SQLAlchemy's execution; its fence holds (a fenced save of the batch writes nothing and is not announced, the others
are written and announced at commit); a message sent before answers its first send; a batch the database refuses is
rolled back and raised as SQLAlchemy raises it, each save then written alone."""

import asyncio
import dataclasses
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import asyncpg
import pytest
from a2a.types import TaskState
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from a2a_bridge.core.auth import owner_context
from a2a_bridge.store.ledger import Fenced, SentMessage
from a2a_bridge.store.pg_session import CHANNEL
from tests.store.test_ledger_contract import OWNER, opened, record, task

BATCH = 8
"""Saves of one batch."""


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    if not os.environ.get("A2A_BRIDGE_PG_URL") and os.environ.get("CI") != "true":
        pytest.skip("no PostgreSQL: run `export A2A_BRIDGE_PG_URL=$(bash .ci/postgres)`")
    yield request.getfixturevalue("pg_database")


async def fenced_batch(url: str) -> tuple[list[object], list[str], int, set[str], list[str]]:
    """BATCH new tasks, then one batch of their next saves, one of them over a stale version, and a message sent twice.
    Returns the batch's answers, the payloads heard, SQLAlchemy's statements during the batch, the tasks whose
    event log the batch wrote, and the fenced task's stored state and version."""
    owner = owner_context(OWNER)
    async with opened(url) as (stores, ledger):
        store, _ = stores.for_agent("agent")
        await ledger.start_session(datetime.now(UTC))
        ids = [str(uuid.uuid4()) for _ in range(BATCH)]
        await asyncio.gather(*(
            ledger.save(store, task(i, TaskState.TASK_STATE_WORKING), owner, record(i, "claimed", 1), [], new=True)
            for i in ids
        ))
        sent = SentMessage("f", ids[0], None, 1)
        assert await ledger.remember("agent", OWNER, "m-1", sent) is None
        listener = await asyncpg.connect(url)
        heard: list[str] = []
        await listener.add_listener(CHANNEL, lambda *args: heard.append(args[-1]))
        statements: list[str] = []

        def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
            statements.append(statement)

        engine = stores.engine
        assert engine is not None
        event.listen(engine.sync_engine, "before_cursor_execute", count)
        try:
            stale = ids[0]
            answers = await asyncio.gather(
                *(
                    ledger.save(
                        store, task(i, TaskState.TASK_STATE_COMPLETED), owner,
                        record(i, "completed", 2, 1 if i == stale else 2), [], log=[(2, f'{{"n": "{i}"}}')],
                    )
                    for i in ids
                ),
                ledger.remember("agent", OWNER, "m-1", SentMessage("g", None, None, 2)),
                return_exceptions=True,
            )
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", count)
        deadline = asyncio.get_running_loop().time() + 10
        while len(heard) < 2 * (BATCH - 1) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        await listener.close()
        async with engine.connect() as conn:
            logged = {row[0] for row in (await conn.execute(text("SELECT task_id FROM bridge_events"))).all()}
            stored = (await conn.execute(
                text("SELECT state, version FROM bridge_tasks WHERE task_id = :id"), {"id": stale})).one()
            status = (await conn.execute(text("SELECT status FROM tasks_agent WHERE id = :id"), {"id": stale})).scalar_one()
        return answers, heard, len(statements), logged, [stored[0], str(stored[1]), str(status.get("state"))]


def test_a_batch_is_written_on_asyncpg_and_its_fenced_save_writes_nothing(pg_url: str) -> None:
    answers, heard, statements, logged, stale = asyncio.run(asyncio.wait_for(fenced_batch(pg_url), 60))
    assert statements == 0, "the batch goes to asyncpg directly, none of it through SQLAlchemy's execution"
    assert isinstance(answers[0], Fenced)
    assert answers[1:BATCH] == [None] * (BATCH - 1)
    fenced_id = answers[0].task_id  # type: ignore[union-attr]
    assert answers[BATCH] == SentMessage("f", fenced_id, None, 1), "a message sent before answers its first send"
    assert stale == ["working", "1", "TASK_STATE_WORKING"], "the fenced save changed neither record nor task"
    assert fenced_id not in logged and len(logged) == BATCH - 1, "nor wrote its event log"
    told = {payload.split(":")[1] for payload in heard}
    assert fenced_id not in told, "nor was announced"
    assert len([p for p in heard if p.startswith("t:")]) == BATCH - 1
    assert len([p for p in heard if p.startswith("e:")]) == BATCH - 1


async def refused_batch(url: str) -> tuple[BaseException | None, bool, bool]:
    """One batch of a good save and a save whose record the database refuses (a NUL in its agent's name, which PostgreSQL's text refuses; a record
    type compiled by mypyc holds no None there). Returns the
    refused save's error and whether each task was stored."""
    owner = owner_context(OWNER)
    async with opened(url) as (stores, ledger):
        store, _ = stores.for_agent("agent")
        await ledger.start_session(datetime.now(UTC))
        good, bad = str(uuid.uuid4()), str(uuid.uuid4())
        broken = dataclasses.replace(record(bad, "claimed", 1), agent="agent\x00")
        answers = await asyncio.gather(
            ledger.save(store, task(good, TaskState.TASK_STATE_WORKING), owner, record(good, "claimed", 1), [], new=True),
            ledger.save(store, task(bad, TaskState.TASK_STATE_WORKING), owner, broken, [], new=True),
            return_exceptions=True,
        )
        assert answers[0] is None
        error = answers[1] if isinstance(answers[1], BaseException) else None
        return error, await ledger.get(good) is not None, await ledger.get(bad) is not None


def test_a_refused_batch_is_rolled_back_and_raised_as_sqlalchemy_raises_it(pg_url: str) -> None:
    error, good, bad = asyncio.run(asyncio.wait_for(refused_batch(pg_url), 60))
    assert isinstance(error, DBAPIError), error
    assert good and not bad


async def own_notices(url: str) -> tuple[list[tuple[str, str]], list[str]]:
    """A save with an event-log row, then a notice from another connection. Returns what the ledger's listeners were
    told up to that notice, and what another listener heard of the save."""
    owner = owner_context(OWNER)
    async with opened(url) as (stores, ledger):
        store, _ = stores.for_agent("agent")
        await ledger.start_session(datetime.now(UTC))
        told: list[tuple[str, str]] = []
        marker = asyncio.get_running_loop().create_future()

        def notice(kind: str, task_id: str, _detail: str) -> None:
            told.append((kind, task_id))
            if kind == "r" and not marker.done():
                marker.set_result(None)

        ledger.on_notice(notice)
        other = await asyncpg.connect(url)
        heard: list[str] = []
        await other.add_listener(CHANNEL, lambda *args: heard.append(args[-1]))
        task_id = str(uuid.uuid4())
        await ledger.save(
            store, task(task_id, TaskState.TASK_STATE_WORKING), owner, record(task_id, "claimed", 1), [], new=True,
            log=[(1, '{"n": 1}')],
        )
        await other.execute(f"SELECT pg_notify('{CHANNEL}', 'r:marker')")
        await marker  # delivered after the save's own notices: those were heard (and dropped) before it
        await other.close()
        return told, heard


def test_a_replica_drops_its_own_notices_and_tells_its_listeners_itself(pg_url: str) -> None:
    told, heard = asyncio.run(asyncio.wait_for(own_notices(pg_url), 60))
    task_id = told[0][1]
    assert told == [("t", task_id), ("r", "marker")], "each write told once, at commit, and no own event notice"
    assert [payload.split(":")[0] for payload in heard[:2]] == ["t", "e"], "another replica hears both"


async def writer_killed(url: str) -> tuple[int | None, int | None]:
    """A save, then the writer's backend terminated from another connection. Returns the pid filtered before, and
    after the termination was seen (or the deadline passed)."""
    owner = owner_context(OWNER)
    async with opened(url) as (stores, ledger):
        store, _ = stores.for_agent("agent")
        await ledger.start_session(datetime.now(UTC))
        task_id = str(uuid.uuid4())
        await ledger.save(store, task(task_id, TaskState.TASK_STATE_WORKING), owner, record(task_id, "claimed", 1), [], new=True)
        before = ledger._writer_pid  # type: ignore[attr-defined]
        other = await asyncpg.connect(url)
        await other.execute("SELECT pg_terminate_backend($1)", before)
        await other.close()
        deadline = asyncio.get_running_loop().time() + 10
        while ledger._writer_pid is not None and asyncio.get_running_loop().time() < deadline:  # type: ignore[attr-defined]
            await asyncio.sleep(0.02)
        return before, ledger._writer_pid  # type: ignore[attr-defined]


def test_a_killed_writer_backend_no_longer_filters_its_pid(pg_url: str) -> None:
    before, after = asyncio.run(asyncio.wait_for(writer_killed(pg_url), 60))
    assert before is not None, "the writer's pid is filtered while it is held"
    assert after is None, "once its backend ends, a pid PostgreSQL may give another backend is heard again"
