"""The ledger's contract, the same on every store (memory, SQLite, and PostgreSQL where the tests have one): a new
task is written only if absent (TaskExists); an existing one only over the record version its writer holds (a writer
that read an older version, a replica paused while another took its claim over, writes nothing: Fenced), and never
once its claim has ended but by the claim that ended it writing the same end (Fenced, for saves, record writes and
compare-and-set alike); the event log rows go with their save, `read` gives a record and its task of one revision, and
saves batched into one transaction each get their own answer; tasks are counted by agent and state, and listed newest
first by agent, by state and page by page from a cursor."""

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from a2a.server.context import ServerCallContext
from a2a.server.tasks import DatabasePushNotificationConfigStore
from a2a.types import Task, TaskPushNotificationConfig, TaskState, TaskStatus
from sqlalchemy import text

from a2a_bridge.core.auth import owner_context
from a2a_bridge.core.claims import Claim
from a2a_bridge.store.ledger import (
    ClaimEvent, Delivery, Fenced, Ledger, PushAdded, SentMessage, TaskExists, TaskQuery, TaskRecord,
)
from a2a_bridge.store.push_rows import Drop, Settle
from a2a_bridge.store.stores import StoreConfig, Stores

OWNER = "alice"


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "memory":
        yield "memory"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        if not os.environ.get("A2A_BRIDGE_PG_URL") and os.environ.get("CI") != "true":
            pytest.skip("no PostgreSQL: run `export A2A_BRIDGE_PG_URL=$(bash .ci/postgres)`")
        yield request.getfixturevalue("pg_database")


def task(task_id: str, state: "TaskState.ValueType") -> Task:
    return Task(id=task_id, context_id="c", status=TaskStatus(state=state))


def record(task_id: str, claim_state: str, revision: int, version: int | None = None, generation: int = 1) -> TaskRecord:
    """A record at `revision`, written as `version` (the revision unless said)."""
    claim = Claim(state=claim_state, claim_generation=generation)
    return TaskRecord(
        task_id, "agent", OWNER, OWNER, datetime.now(UTC), "working", revision, claim=claim,
        version=revision if version is None else version,
    )


@contextlib.asynccontextmanager
async def opened(url: str) -> AsyncIterator[tuple[Stores, Ledger]]:
    """The stores of a URL, with agent "agent"'s tables, initialised, and their ledger; both closed after."""
    stores = Stores(StoreConfig.parse(url))
    stores.for_agent("agent")
    await stores.initialize()
    ledger: Ledger = stores.ledger()
    try:
        yield stores, ledger
    finally:
        await ledger.close()
        await stores.close()


async def contract(url: str) -> None:
    owner: ServerCallContext = owner_context(OWNER)
    async with opened(url) as (stores, ledger):
        store, _ = stores.for_agent("agent")
        await ledger.start_session(datetime.now(UTC))
        task_id = str(uuid.uuid4())
        await ledger.save(store, task(task_id, TaskState.TASK_STATE_WORKING), owner, record(task_id, "claimed", 1), [], new=True)
        with pytest.raises(TaskExists):
            await ledger.save(store, task(task_id, TaskState.TASK_STATE_WORKING), owner, record(task_id, "claimed", 9), [], new=True)
        found = await ledger.read(task_id, store, owner)
        assert found is not None and found[0].revision == 1 and found[1].status.state == TaskState.TASK_STATE_WORKING

        with pytest.raises(Fenced):
            await ledger.save(store, task(task_id, TaskState.TASK_STATE_WORKING), owner, record(task_id, "claimed", 2, 3), [])
        await ledger.put(record(task_id, "claimed", 1, 2, generation=2), [])
        with pytest.raises(Fenced):
            await ledger.save(
                store, task(task_id, TaskState.TASK_STATE_COMPLETED), owner, record(task_id, "completed", 2, 2), [],
                log=[(2, "{}")],
            )
        with pytest.raises(Fenced):
            await ledger.put(record(task_id, "claimed", 1, 2), [])
        assert not await ledger.put_if(record(task_id, "needs_reconciliation", 1, 2), Claim(state="claimed", claim_generation=2), [])
        found = await ledger.read(task_id, store, owner)
        assert found is not None and (found[0].version, found[0].claim.claim_generation) == (2, 2), "a fenced write changes nothing"
        if url != "memory":
            assert await ledger.events_after(task_id, 0) == [], "nor writes its event log"

        await ledger.save(store, task(task_id, TaskState.TASK_STATE_FAILED), owner, record(task_id, "failed", 2, 3, 2), [], log=[(2, "{}")])
        with pytest.raises(Fenced):
            await ledger.save(store, task(task_id, TaskState.TASK_STATE_COMPLETED), owner, record(task_id, "completed", 3, 4, 2), [])
        with pytest.raises(Fenced):
            await ledger.put(record(task_id, "claimed", 3, 4, 2), [])
        assert not await ledger.put_if(record(task_id, "claimed", 3, 4, 2), Claim(state="failed", claim_generation=2), [])
        await ledger.save(store, task(task_id, TaskState.TASK_STATE_FAILED), owner, record(task_id, "failed", 3, 4, 2), [])
        found = await ledger.read(task_id, store, owner)
        assert found is not None and found[0].claim.state == "failed" and found[1].status.state == TaskState.TASK_STATE_FAILED

        ids = [str(uuid.uuid4()) for _ in range(6)]
        await asyncio.gather(*(
            ledger.save(store, task(i, TaskState.TASK_STATE_WORKING), owner, record(i, "claimed", 1), [], new=True) for i in ids
        ))
        ended = ids[:3]
        await asyncio.gather(*(
            ledger.save(store, task(i, TaskState.TASK_STATE_COMPLETED), owner, record(i, "completed", 2), [], log=[(2, "{}")])
            for i in ended
        ))
        answers = await asyncio.gather(
            *(
                ledger.save(store, task(i, TaskState.TASK_STATE_WORKING), owner, record(i, "claimed", 3, 3 if i in ended else 2), [], log=[(3, "{}")])
                for i in ids
            ),
            return_exceptions=True,
        )
        assert [type(answer) for answer in answers] == [Fenced] * 3 + [type(None)] * 3
        for i in ids:
            found = await ledger.read(i, store, owner)
            assert found is not None
            assert (found[0].revision, found[0].claim.state) == ((2, "completed") if i in ended else (3, "claimed"))
            if url != "memory":
                assert [seq for seq, _ in await ledger.events_after(i, 0)] == ([2] if i in ended else [3])
        assert await ledger.put_if(record(ids[4], "claimed", 4, 3), Claim(state="claimed", claim_generation=1), [])


def test_the_ledger_contract(store_url: str) -> None:
    asyncio.run(contract(store_url))


async def listing(url: str) -> None:
    stores = Stores(StoreConfig.parse(url))
    stores_of = {agent: stores.for_agent(agent)[0] for agent in ("agent", "other")}
    await stores.initialize()
    ledger: Ledger = stores.ledger()
    owner = owner_context(OWNER)
    try:
        await ledger.start_session(datetime.now(UTC))
        start = datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)
        made = []
        for n in range(7):
            agent = "agent" if n % 2 == 0 else "other"
            state = "TASK_STATE_COMPLETED" if n < 4 else "TASK_STATE_WORKING"
            task_id = f"t{n}"
            created = start + timedelta(microseconds=n // 2)
            row = TaskRecord(task_id, agent, OWNER, OWNER, created, state, 1, claim=Claim(state="claimed"))
            await ledger.save(stores_of[agent], task(task_id, TaskState.Value(state)), owner, row, [], new=True)
            made.append(row)
        newest = sorted(made, key=lambda r: (-r.created_at.timestamp(), r.task_id))
        assert [r.task_id for r in await ledger.recent(10)] == [r.task_id for r in newest]
        assert await ledger.state_counts() == {
            ("agent", "TASK_STATE_COMPLETED"): 2, ("other", "TASK_STATE_COMPLETED"): 2,
            ("agent", "TASK_STATE_WORKING"): 2, ("other", "TASK_STATE_WORKING"): 1,
        }
        pages: list[str] = []
        query = TaskQuery()
        while page := await ledger.recent(3, query):
            pages += [r.task_id for r in page]
            query = TaskQuery(after=(page[-1].created_at, page[-1].task_id))
        assert pages == [r.task_id for r in newest], "pages of three, microseconds apart or equal, hold each task once"
        agent_working = await ledger.recent(10, TaskQuery(agent="agent", state="TASK_STATE_WORKING"))
        assert [r.task_id for r in agent_working] == ["t6", "t4"]
    finally:
        await ledger.close()
        await stores.close()


def test_tasks_are_counted_and_listed_page_by_page(store_url: str) -> None:
    asyncio.run(listing(store_url))


async def claim_events_and_messages(url: str) -> None:
    owner = owner_context(OWNER)
    async with opened(url) as (stores, ledger):
        store, _ = stores.for_agent("agent")
        session = await ledger.start_session(datetime.now(UTC))
        task_id = str(uuid.uuid4())
        at = datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)
        posted = [
            ClaimEvent(task_id, 0, "create", "unclaimed", {"message_id": "m-1"}, at),
            ClaimEvent(
                task_id, 1, "claim", "claimed", {"turn": "first message", "nested": {"n": [1, 2.5, True, None]}}, at,
                session, at + timedelta(minutes=5),
            ),
        ]
        await ledger.save(store, task(task_id, TaskState.TASK_STATE_WORKING), owner, record(task_id, "claimed", 1), posted, new=True)
        later = at + timedelta(seconds=1, microseconds=7)
        ending = ClaimEvent(task_id, 1, "complete", "completed", {"a2a_state": "TASK_STATE_COMPLETED", "message": "héllo ✓"}, later)
        await ledger.save(store, task(task_id, TaskState.TASK_STATE_COMPLETED), owner, record(task_id, "completed", 2), [ending])
        rows = await ledger.claim_events(task_id)
        assert rows == [{k: v for k, v in event.row().items() if k != "task_id"} for event in [*posted, ending]], rows
        assert all(row["at"].tzinfo is not None for row in rows), "times come back as UTC datetimes"
        assert await ledger.claim_events(str(uuid.uuid4())) == []

        sent = SentMessage("f" * 64, task_id, None, session)
        assert await ledger.remember("agent", OWNER, "m-1", sent) is None
        assert await ledger.remember("agent", OWNER, "m-1", SentMessage("e" * 64, "other", None, session)) == sent
        assert await ledger.remember("agent", "bob", "m-1", SentMessage("e" * 64, "other", None, session)) is None, "per owner"
        await ledger.settle("agent", OWNER, "m-1", task_id, None)
        again = await ledger.remember("agent", OWNER, "m-1", SentMessage("e" * 64, "other", None, session))
        assert again is not None and (again.fingerprint, again.task_id) == ("f" * 64, task_id)


def test_claim_events_and_sent_messages_come_back_as_stored(store_url: str) -> None:
    """A task's claim events in the order posted, with their evidence and times; a message id remembered per agent and
    owner with its fingerprint and task, the first one kept (what idempotent retries rely on), on every store."""
    asyncio.run(claim_events_and_messages(url=store_url))


async def event_log(url: str) -> None:
    owner = owner_context(OWNER)
    async with opened(url) as (stores, ledger):
        store, _ = stores.for_agent("agent")
        await ledger.start_session(datetime.now(UTC))
        task_id = str(uuid.uuid4())
        first = [(1, '{"statusUpdate":{"taskId":"a b"}}'), (3, '{"artifactUpdate":{"x":"h\\u00e9 \\n ✓"}}')]
        await ledger.save(store, task(task_id, TaskState.TASK_STATE_WORKING), owner, record(task_id, "claimed", 3, version=1), [], new=True, log=first)
        second = [(4, '{"statusUpdate":{}}'), (5, "{}"), (6, '{"statusUpdate":{"n":6}}')]
        await ledger.save(store, task(task_id, TaskState.TASK_STATE_COMPLETED), owner, record(task_id, "completed", 6, version=2), [], log=second)
        assert await ledger.events_after(task_id, 0) == first + second, "each event under its revision, in order"
        assert await ledger.events_after(task_id, 1) == first[1:] + second
        assert await ledger.events_after(task_id, 4) == second[1:], "from within a save's events"
        assert await ledger.events_after(task_id, 6) == []
        if stores.engine is not None:
            async with stores.engine.connect() as conn:
                query = text("SELECT seq FROM bridge_events WHERE task_id = :task_id ORDER BY seq")
                rows = (await conn.execute(query, {"task_id": task_id})).all()
            assert [row.seq for row in rows] == [3, 6], "one row per save, under its last revision"


def test_the_events_of_a_save_come_back_one_by_one_under_their_revisions(store_url: str) -> None:
    """A save's logged events (revisions with gaps, where a save's item is the task itself) read back each under its
    revision, from any revision on, on every store (SQLite and PostgreSQL keep a save's events in one row)."""
    asyncio.run(event_log(store_url))


async def outbox_rows(url: str) -> None:
    owner = owner_context(OWNER)
    async with opened(url) as (stores, ledger):
        store, _ = stores.for_agent("agent")
        session = await ledger.start_session(datetime.now(UTC))
        now = datetime.now(UTC)
        task_id = str(uuid.uuid4())
        await ledger.add_delivery(Delivery(task_id, "hook", "agent", 0, due_at=now))
        await ledger.add_delivery(Delivery(task_id, "hook", "agent", 5, due_at=now))
        assert await ledger.due_deliveries("agent", now, 10) == [], "nothing to deliver before an event is logged"
        await ledger.save(store, task(task_id, TaskState.TASK_STATE_WORKING), owner, record(task_id, "claimed", 1), [], new=True, log=[(1, "{}")])
        [due] = await ledger.due_deliveries("agent", now, 10)
        assert (due.delivered, due.holds, due.dead) == (0, 0, False), "the first row added stands"
        until = now + timedelta(seconds=60)
        assert await ledger.hold_delivery(due, session, until)
        assert not await ledger.hold_delivery(due, session + 1, until), "one holder at a time"
        held = due._replace(holder=session, held_until=until, holds=1)
        assert not await ledger.settle_delivery(held._replace(holds=7), held._replace(delivered=1)), "only the hold"
        assert await ledger.settle_delivery(held, held._replace(delivered=1))
        assert await ledger.due_deliveries("agent", now, 10) == [], "delivered up to the last event"
        await ledger.save(store, task(task_id, TaskState.TASK_STATE_FAILED), owner, record(task_id, "failed", 2), [], log=[(2, "{}")])
        assert [seq for seq, _ in await ledger.events_after(task_id, 1)] == [2]
        [due] = await ledger.due_deliveries("agent", now, 10)
        assert await ledger.hold_delivery(due, session, until)
        held = due._replace(holder=session, held_until=until, holds=2)
        gave_up = held._replace(attempts=3, dead=True, last_error="HTTP 500", failing_since=now)
        assert await ledger.settle_delivery(held, gave_up)
        assert await ledger.due_deliveries("agent", now, 10) == [], "a dead letter is not due"
        [dead] = await ledger.deliveries("agent", dead=True)
        assert (dead.task_id, dead.attempts, dead.last_error) == (task_id, 3, "HTTP 500")
        assert await ledger.redeliver("agent", task_id, None, now) == 1
        [due] = await ledger.due_deliveries("agent", now, 10)
        assert (due.delivered, due.attempts, due.dead) == (1, 0, False), "delivered again from where it stopped"
        assert not await ledger.drop_delivery(due._replace(holds=9)), "only as read"
        assert await ledger.drop_delivery(due)
        assert await ledger.deliveries("agent", task_id=task_id) == []


def test_push_deliveries_are_held_by_one_and_settled_from_where_they_stopped(store_url: str) -> None:
    """The outbox's rows on every store: a row per task and config (the first kept), due once an event after it is
    logged, held by one session at a time, settled only under its hold, given up and delivered again from where it
    stopped."""
    asyncio.run(outbox_rows(store_url))


async def changes_left_to_the_next_commit(url: str) -> None:
    owner = owner_context(OWNER)
    async with opened(url) as (stores, ledger):
        store, _ = stores.for_agent("agent")
        session = await ledger.start_session(datetime.now(UTC))
        now = datetime.now(UTC)
        task_id = str(uuid.uuid4())
        await ledger.add_delivery(Delivery(task_id, "hook", "agent", 0, due_at=now))
        await ledger.save(store, task(task_id, TaskState.TASK_STATE_WORKING), owner, record(task_id, "claimed", 1), [], new=True, log=[(1, "{}")])
        [due] = await ledger.due_deliveries("agent", now, 10)
        settled = ledger.later(Settle(due, due._replace(delivered=1)))
        dropped = ledger.later(Drop(due._replace(delivered=1)))
        refused = ledger.later(Drop(due))
        until = now + timedelta(seconds=60)
        assert not await ledger.hold_delivery(due, session, until), "a change asked later is written before it"
        assert (await settled, await dropped, await refused) == (True, True, False), "in the order asked"
        assert await ledger.deliveries("agent", task_id=task_id) == []
        unasked = ledger.later(Drop(due))
        assert await asyncio.wait_for(unasked, 5) is False, "written within a moment when nothing else is"


def test_outbox_changes_left_to_the_next_commit_are_written_in_order_with_it(store_url: str) -> None:
    """A settle or drop asked `later` is written with the next write the ledger commits, in the order asked, and on
    its own within a moment when none comes; each answers whether it changed its row."""
    asyncio.run(changes_left_to_the_next_commit(store_url))


async def configs_with_saves(url: str) -> None:
    owner = owner_context(OWNER)
    async with opened(url) as (stores, ledger):
        store, push_store = stores.for_agent("agent")
        await ledger.start_session(datetime.now(UTC))
        now = datetime.now(UTC)
        task_id, fenced_id = str(uuid.uuid4()), str(uuid.uuid4())

        def added(task: str, config_id: str, after: int) -> PushAdded:
            if not isinstance(push_store, DatabasePushNotificationConfigStore):
                return PushAdded(Delivery(task, config_id, "agent", after, due_at=now))
            config = TaskPushNotificationConfig(task_id=task, id=config_id, url="https://hooks.example.com/h")
            model = push_store._to_orm(task, config, OWNER)
            table = push_store.config_model.__table__
            return PushAdded(Delivery(task, config_id, "agent", after, due_at=now), table,
                             {column.key: getattr(model, column.key) for column in table.columns})

        await ledger.save(store, task(task_id, TaskState.TASK_STATE_WORKING), owner, record(task_id, "claimed", 1), [],
                          new=True, log=[(1, "{}")], pushed=[added(task_id, "hook", 0)])
        await ledger.save(store, task(fenced_id, TaskState.TASK_STATE_WORKING), owner, record(fenced_id, "claimed", 1), [], new=True)
        with pytest.raises(Fenced):
            await ledger.save(store, task(fenced_id, TaskState.TASK_STATE_WORKING), owner, record(fenced_id, "claimed", 2, 5), [],
                              log=[(2, "{}")], pushed=[added(fenced_id, "hook", 1)])
        with pytest.raises(TaskExists):
            await ledger.save(store, task(task_id, TaskState.TASK_STATE_WORKING), owner, record(task_id, "claimed", 1), [],
                              new=True, pushed=[added(task_id, "other", 0)])
        assert [(d.task_id, d.config_id, d.delivered) for d in await ledger.deliveries("agent")] == [(task_id, "hook", 0)], (
            "a refused save writes no outbox row"
        )
        if isinstance(push_store, DatabasePushNotificationConfigStore):
            assert [c.id for c in await push_store.get_info_for_dispatch(task_id)] == ["hook"]
            assert [c.url for c in await push_store.get_info(task_id, owner)] == ["https://hooks.example.com/h"]
            assert await push_store.get_info_for_dispatch(fenced_id) == []
        if url != "memory":
            events = await asyncio.gather(*(ledger.events_after(i, seq) for i, seq in ((task_id, 0), (fenced_id, 0), (task_id, 1))))
            assert [[seq for seq, _ in rows] for rows in events] == [[1], [], []], "reads asked at once, answered apart"


def test_push_configs_added_with_a_save_are_written_by_it_and_not_by_a_refused_one(store_url: str) -> None:
    """A push config that comes with a message is written in its task's save (its outbox row, and on a database its
    config row, readable by the SDK's store): a save refused as fenced or as a task that exists writes neither."""
    asyncio.run(configs_with_saves(store_url))
