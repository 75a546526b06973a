"""The push outbox's rows on SQLite and PostgreSQL (`ledger.Delivery`, table `bridge_push_deliveries`): the part of
`SqlLedger` that holds, settles and lists deliveries (holds, settles and drops in the ledger's group commit:
`delivery_batch`) and reads the events to deliver (the reads asked at once in one query); what is to deliver is the
event log (`bridge_events`)."""

import asyncio
from datetime import datetime

from mypy_extensions import mypyc_attr
from sqlalchemy import and_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from a2a_bridge.store.event_rows import row_events
from a2a_bridge.store.group_commit import GroupCommit
from a2a_bridge.store.ledger_batch import Outcome, Write
from a2a_bridge.store.ledger_tables import deliveries_table, delivery_of, delivery_row, events_table
from a2a_bridge.store.push_rows import Change, Delivery, Drop, Hold, Settle


@mypyc_attr(allow_interpreted_subclasses=True)
class SqlDeliveries:
    """The outbox's rows, for `SqlLedger` (which gives the engines, `shared` and `_init`)."""

    engine: AsyncEngine
    reader: AsyncEngine
    shared: bool
    _writes: GroupCommit[Write, Outcome]
    _event_reads: GroupCommit[tuple[str, int], list[tuple[int, str]]] | None = None

    async def _init(self) -> None: ...

    async def add_delivery(self, delivery: Delivery) -> None:
        """The outbox row of a task's new push config, unless it has one."""
        await self._init()
        table = deliveries_table
        insert_row = (postgresql.insert if self.shared else sqlite.insert)(table).on_conflict_do_nothing(
            index_elements=["task_id", "config_id"]
        )
        async with self.engine.begin() as conn:
            await conn.execute(insert_row, delivery_row(delivery))

    async def due_deliveries(self, agent: str, now: datetime, limit: int) -> list[Delivery]:
        """The agent's deliveries due by `now` that have an event to deliver, the longest due first (held ones too:
        whether a hold may be taken over is the caller's to judge)."""
        await self._init()
        d, e = deliveries_table, events_table
        waiting = select(e.c.seq).where(and_(e.c.task_id == d.c.task_id, e.c.seq > d.c.delivered)).exists()
        query = (
            select(d)
            .where(and_(d.c.agent == agent, d.c.dead.is_(False), d.c.due_at <= now, waiting))
            .order_by(d.c.due_at)
            .limit(limit)
        )
        async with self.reader.connect() as conn:
            return [delivery_of(row) for row in (await conn.execute(query)).all()]

    async def hold_delivery(self, delivery: Delivery, session: int, until: datetime) -> bool:
        """Hold a delivery for `session` until `until`, only if it is still as read (delivered up to the same revision,
        held as often): one replica delivers it."""
        return await self._change(Hold(delivery, session, until))

    async def settle_delivery(self, held: Delivery, settled: Delivery) -> bool:
        """Store what became of a held delivery (delivered further, or its failure and next attempt), releasing the
        hold; False (nothing stored) when another replica took the hold over meanwhile."""
        return await self._change(Settle(held, settled))

    async def drop_delivery(self, delivery: Delivery) -> bool:
        """Remove a delivery that is done with (its task's end delivered, its config deleted), only if it is held as
        often as when read: False when another replica took it meanwhile."""
        return await self._change(Drop(delivery))

    async def _change(self, change: Change) -> bool:
        """A change of an outbox row, in the ledger's next group commit (`delivery_batch`)."""
        await self._init()
        changed = await self._writes.submit(change)
        return changed is True

    def later(self, change: Change) -> "asyncio.Future[bool]":
        """A change of an outbox row written with the ledger's next group commit, beginning none of its own (a save's,
        or one begun after the group commit's `linger` at the most): whether it changed its row. The changes are
        written in the order asked, after the saves of their batch. (The ledger is initialised: its outbox rows were
        read or written.)"""
        outcome = self._writes.later(change)
        changed: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        outcome.add_done_callback(lambda done: _answer(done, changed))
        return changed

    async def events_after(self, task_id: str, seq: int) -> list[tuple[int, str]]:
        """A task's logged events after `seq`, in order: read with the other reads asked meanwhile, in one query."""
        await self._init()
        if self._event_reads is None:
            self._event_reads = GroupCommit(self._events_many, self._events_one)
        return await self._event_reads.submit((task_id, seq))

    async def _events_many(self, asked: list[tuple[str, int]]) -> list[list[tuple[int, str]]]:
        e = events_table
        first = {task_id: seq for task_id, seq in sorted(asked, key=lambda pair: -pair[1])}
        after: dict[str, list[tuple[int, str]]] = {task_id: [] for task_id in first}
        query = select(e.c.task_id, e.c.seq, e.c.body).where(e.c.task_id.in_(list(first))).order_by(e.c.task_id, e.c.seq)
        async with self.reader.connect() as conn:
            for row in (await conn.execute(query)).all():
                if row.seq > first[row.task_id]:
                    after[row.task_id] += row_events(row.seq, row.body)
        return [[event for event in after[task_id] if event[0] > seq] for task_id, seq in asked]

    async def _events_one(self, asked: tuple[str, int]) -> list[tuple[int, str]]:
        return (await self._events_many([asked]))[0]

    async def deliveries(self, agent: str, *, task_id: str | None = None, dead: bool | None = None) -> list[Delivery]:
        """The agent's outbox rows: of one task, dead letters only, or all."""
        await self._init()
        d = deliveries_table
        conditions = [d.c.agent == agent]
        if task_id is not None:
            conditions.append(d.c.task_id == task_id)
        if dead is not None:
            conditions.append(d.c.dead.is_(dead))
        async with self.reader.connect() as conn:
            rows = (await conn.execute(select(d).where(and_(*conditions)).order_by(d.c.task_id, d.c.config_id))).all()
        return [delivery_of(row) for row in rows]

    async def redeliver(self, agent: str, task_id: str, config_id: str | None, now: datetime) -> int:
        """Dead letters of a task (one config's, or all) delivered again from where they stopped; how many."""
        await self._init()
        d = deliveries_table
        conditions = [d.c.agent == agent, d.c.task_id == task_id, d.c.dead.is_(True)]
        if config_id is not None:
            conditions.append(d.c.config_id == config_id)
        async with self.engine.begin() as conn:
            again = await conn.execute(
                update(d).where(and_(*conditions)).values(dead=False, attempts=0, failing_since=None, due_at=now, last_error=None)
            )
        return again.rowcount


def _answer(outcome: "asyncio.Future[Outcome]", changed: "asyncio.Future[bool]") -> None:
    """A change's outcome as whether it changed its row (or its error)."""
    if changed.done():
        return
    error = None if outcome.cancelled() else outcome.exception()
    if error is not None:
        changed.set_exception(error)
    else:
        changed.set_result(not outcome.cancelled() and outcome.result() is True)
