"""The ledger in the same database as the tasks: SQLite (one process) or PostgreSQL (shared by replicas, which hold
an advisory lock on their session and hear each other's changes by LISTEN/NOTIFY on that same connection)."""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.tasks import DatabaseTaskStore, TaskStore
from a2a.types import Task
from sqlalchemy import and_, bindparam, delete, func, insert, or_, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from a2a_bridge.core.claims import TERMINAL, Claim
from a2a_bridge.store.push_rows import Change, Drop, Hold, Settle
from a2a_bridge.store.event_rows import log_rows
from a2a_bridge.store.group_commit import GroupCommit
from a2a_bridge.store.item_texts import TEXTS
from a2a_bridge.store.ledger import (
    HELD,
    ClaimEvent,
    PushAdded,
    Fenced,
    Notice,
    Request,
    SentMessage,
    TaskExists,
    TaskQuery,
    TaskRecord,
    Written,
    read_consistently,
)
from a2a_bridge.store.ledger_batch import (
    Outcome,
    Remember,
    Save,
    SqliteBatch,
    Write,
)
from a2a_bridge.store.ledger_tables import (
    claim_events_table,
    delivery_row,
    event_rows,
    messages_table,
    STORED_BYTES,
    create_or_migrate,
    record_of,
    records_table,
    requests_table,
    row_values,
    sessions_table,
    task_row,
    utc,
)
from a2a_bridge.store.pg_batch import PgBatch
from a2a_bridge.store.pg_session import (
    NOTIFY,
    REQUEST_NOTICE,
    SessionConnection,
    request_params,
    session_alive,
)
from a2a_bridge.store.sql_deliveries import SqlDeliveries
from a2a_bridge.store.store_faults import StoreHealth, transient

log = logging.getLogger(__name__)

STORE_TIME = text("SELECT clock_timestamp()")
_RECORD = select(records_table).where(records_table.c.task_id == bindparam("task_id"))
"""One task's record: built once, as building the statement costs more than its round trip."""


class SqlLedger(SqlDeliveries):
    """The ledger on SQLAlchemy: SQLite or PostgreSQL."""

    def __init__(
        self,
        engine: AsyncEngine,
        health: StoreHealth | None = None,
        observe_write: Callable[[str, float], None] | None = None,
        reader: AsyncEngine | None = None,
    ) -> None:
        """`observe_write` is called with (operation, seconds) for each write its writer waited for (metrics)."""
        self.engine = engine
        self.reader = reader or engine
        """Where reads go: on SQLite a pool of read connections beside the one writer (WAL lets them read while it
        writes), elsewhere the same engine."""
        self.health = health or StoreHealth()
        self.observe_write = observe_write
        self.shared = engine.dialect.name == "postgresql"
        self.writes_at_once = False
        self._ready = False
        self._session = SessionConnection(engine, self._heard, self._terminated)
        self._notices: list[Notice] = []
        self._lost: list[Callable[[], None]] = []
        self._written: list[Written] = []
        self._changed = asyncio.Event()
        self._writes: GroupCommit[Write, Outcome] = GroupCommit(self._write_many, self._write_one)
        self._sqlite = SqliteBatch(engine.dialect) if engine.dialect.name == "sqlite" else None
        self._pg = PgBatch(engine.dialect) if self._sqlite is None else None
        self._texts = TEXTS
        """The JSON texts of the artifacts, history messages and statuses written last (`item_texts`)."""
        self._writer: AsyncConnection | None = None
        """On PostgreSQL the connection the group commit writes on, kept from one batch to the next (the batches run one
        at a time), so that a batch costs no checkout from the pool and no reset on its return; given back to the pool
        when a batch fails, and at close."""
        self._writer_pid: int | None = None
        """The backend process of `_writer` while this process holds it: the notices it sends are this process's own,
        already told here when its batch committed (`_told_here`), and dropped when heard back. Only while held, so a
        pid PostgreSQL gives to another backend later is never mistaken for it."""

    async def _init(self) -> None:
        if not self._ready:
            async with self.engine.begin() as conn:
                await conn.run_sync(create_or_migrate, self.shared)
            self._ready = True

    async def start_session(self, now: datetime) -> int:
        """A new session generation; on PostgreSQL the process holds an advisory lock on it while it lives, and
        listens for the other replicas' changes on the same connection (its loss is the loss of the session)."""
        await self._init()
        async with self.engine.begin() as conn:
            result = await conn.execute(insert(sessions_table).values(started_at=now))
            session = int(result.inserted_primary_key[0])
        if self.shared:
            await self._session.take(session)
        return session

    def _heard(self, pid: int, payload: str) -> None:
        if pid == self._writer_pid and payload[:2] in ("t:", "e:"):
            return
        kind, task_id, *detail = payload.split(":", 2)
        if kind in ("t", "e"):
            self._tell_written([task_id])
        self._announce()
        for notice in self._notices:
            notice(kind, task_id, detail[0] if detail else "")

    def _terminated(self) -> None:
        log.error("the session's database connection is lost: this replica no longer holds its session")
        for lost in self._lost:
            lost()

    def _announce(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def on_notice(self, notice: Notice) -> None:
        """Call `notice` for each change any replica commits (PostgreSQL)."""
        self._notices.append(notice)

    def on_lost(self, lost: Callable[[], None]) -> None:
        """Call `lost` when the connection that holds the session's lock is gone."""
        self._lost.append(lost)

    def on_written(self, written: Written) -> None:
        """Call `written` with the tasks each commit (here, or announced by another replica) may have changed."""
        self._written.append(written)

    def _tell_written(self, task_ids: list[str]) -> None:
        for written in self._written:
            written(task_ids)

    def changed(self) -> asyncio.Event:
        """An event set at the next change committed here, or announced by another replica."""
        return self._changed

    async def session_alive(self, session: int) -> bool:
        """Whether the process of a session still runs: on SQLite only one process uses the file, so none other does."""
        return self.shared and await session_alive(self.engine, session)

    async def store_time(self) -> datetime | None:
        """The database's clock where replicas share it (PostgreSQL), the one clock their leases are read on; None on
        SQLite (one process: its own clock)."""
        if not self.shared:
            return None
        async with self.engine.connect() as conn:
            return utc((await conn.execute(STORE_TIME)).scalar_one())

    async def close(self) -> None:
        await self._writes.close()
        writer, self._writer = self._writer, None
        self._writer_pid = None
        if writer is not None:
            await writer.close()
        await self._session.drop()

    async def get(self, task_id: str) -> TaskRecord | None:
        await self._init()
        async with self.reader.connect() as conn:
            row = (await conn.execute(_RECORD, {"task_id": task_id})).first()
        return record_of(row) if row is not None else None

    async def read(
        self, task_id: str, store: TaskStore, owner: ServerCallContext, record: TaskRecord | None = None
    ) -> tuple[TaskRecord, Task] | None:
        """The record and the task of one revision (`record`: one just read, standing for the first read)."""
        return await read_consistently(self.get, store, task_id, owner, record)

    async def recent(self, limit: int, query: TaskQuery = TaskQuery()) -> list[TaskRecord]:
        """At most `limit` records the query holds, the most recently created first."""
        await self._init()
        table = records_table
        statement = select(table).order_by(table.c.created_at.desc(), table.c.task_id).limit(limit)
        if query.agent is not None:
            statement = statement.where(table.c.agent == query.agent)
        if query.state is not None:
            statement = statement.where(table.c.state == query.state)
        if query.after is not None:
            created, task_id = query.after
            statement = statement.where(
                or_(table.c.created_at < created, and_(table.c.created_at == created, table.c.task_id > task_id))
            )
        async with self.reader.connect() as conn:
            return [record_of(r) for r in (await conn.execute(statement)).all()]

    async def state_counts(self) -> dict[tuple[str, str], int]:
        """How many tasks each (agent, A2A state) has: one GROUP BY over the records."""
        await self._init()
        table = records_table
        query = select(table.c.agent, table.c.state, func.count()).group_by(table.c.agent, table.c.state)
        async with self.reader.connect() as conn:
            return {(agent, state): int(count) for agent, state, count in (await conn.execute(query)).all()}

    async def stored_bytes(self, owner: str) -> int:
        """The `stored_bytes` of the owner's records, summed in the database."""
        await self._init()
        async with self.reader.connect() as conn:
            return int((await conn.execute(STORED_BYTES, {"owner": owner})).scalar_one())

    async def save(
        self, store: TaskStore, task: Task, context: ServerCallContext, record: TaskRecord, events: list[ClaimEvent],
        *, new: bool = False, log: Sequence[tuple[int, str]] = (), pushed: Sequence[PushAdded] = (),
    ) -> None:
        """Store the SDK task, its record, the claim events it posted, its event-log rows and the push configs added
        with it (outbox and config rows) in one transaction (shared with the other writes of the moment: see
        group_commit). A new task is written only if absent (TaskExists), an existing one only over the record version
        its writer holds and never once ended (Fenced): a refused save writes none of them."""
        await self._init()
        rows = log_rows(record.task_id, log)
        deliveries = tuple(delivery_row(added.delivery) for added in pushed)
        configs = tuple((added.table, added.config) for added in pushed if added.table is not None and added.config)
        table, row = None, None
        if not isinstance(store, DatabaseTaskStore):
            await store.save(task, context)
        else:
            table, row = store.task_model.__table__, task_row(task, store.owner_resolver(context), self._texts)
        write = Save(table, row, row_values(record), event_rows(events), new, rows, deliveries, configs)
        await self._submit("save", write)

    async def put(self, record: TaskRecord, events: list[ClaimEvent]) -> None:
        """Store the record and its claim events, only over the version its writer holds and never once ended
        (Fenced)."""
        await self._init()
        await self._submit("put", Save(None, None, row_values(record), event_rows(events)))

    async def _submit(self, operation: str, write: Save) -> None:
        started = time.perf_counter()
        try:
            outcome = await self._writes.submit(write)
        finally:
            self._observe(operation, started)
        if isinstance(outcome, TaskExists | Fenced):
            raise outcome

    async def put_if(self, record: TaskRecord, expected: Claim, events: list[ClaimEvent]) -> bool:
        """Store the record only if it is still the version its writer holds, its claim still `expected` (generation
        and state), and not ended: one replica wins."""
        await self._init()
        self.health.ensure_writable()
        started = time.perf_counter()
        try:
            return await self._put_if(record, expected, events)
        finally:
            self._observe("put_if", started)

    def _observe(self, operation: str, started: float) -> None:
        if self.observe_write is not None:
            self.observe_write(operation, time.perf_counter() - started)

    async def _put_if(self, record: TaskRecord, expected: Claim, events: list[ClaimEvent]) -> bool:
        table = records_table
        async with self.engine.begin() as conn:
            updated = await conn.execute(
                update(table)
                .where(
                    and_(
                        table.c.task_id == record.task_id,
                        table.c.version == record.version - 1,
                        table.c.claim_generation == expected.claim_generation,
                        table.c.claim_state == expected.state,
                        table.c.claim_state.not_in(sorted(TERMINAL)),
                    )
                )
                .values(**row_values(record))
            )
            if updated.rowcount != 1:
                return False
            if events:
                await conn.execute(insert(claim_events_table), [event.row() for event in events])
            await self._notify(conn, [f"t:{record.task_id}"])
        self._tell_written([record.task_id])
        self._announce()
        return True

    async def _notify(self, conn: AsyncConnection, payloads: list[str]) -> None:
        """Tell the other replicas, at commit, what changed (PostgreSQL)."""
        if self.shared and payloads:
            await conn.execute(NOTIFY, {"payloads": payloads})

    async def add_request(self, request: Request, at: datetime) -> None:
        """Leave a request for the replica that runs the task; on PostgreSQL one statement that inserts it and notifies,
        committed on its own (one round trip: a cancel crosses replicas on it)."""
        await self._init()
        if self.shared:
            async with self.engine.connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.execute(REQUEST_NOTICE, request_params(request, at))
            return
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(requests_table).values(
                    task_id=request.task_id, kind=request.kind, requested_by=request.requested_by, at=at
                )
            )
            await self._notify(conn, [f"r:{request.task_id}"])

    async def take_requests(self, task_ids: list[str]) -> list[Request]:
        """Remove and return the requests left for these tasks."""
        if not task_ids:
            return []
        await self._init()
        table = requests_table
        async with self.engine.begin() as conn:
            rows = (await conn.execute(select(table).where(table.c.task_id.in_(task_ids)).with_for_update())).all()
            if rows:
                await conn.execute(delete(table).where(table.c.id.in_([r.id for r in rows])))
        return [Request(r.task_id, r.kind, r.requested_by) for r in rows]

    async def pending_requests(self, task_ids: list[str]) -> list[Request]:
        """The requests left for these tasks, left in place (removed by `take_requests` once honoured)."""
        if not task_ids:
            return []
        await self._init()
        table = requests_table
        async with self.reader.connect() as conn:
            rows = (await conn.execute(select(table).where(table.c.task_id.in_(task_ids)))).all()
        return [Request(r.task_id, r.kind, r.requested_by) for r in rows]

    async def _records(self, *conditions: Any) -> list[TaskRecord]:
        await self._init()
        async with self.reader.connect() as conn:
            return [record_of(r) for r in (await conn.execute(select(records_table).where(and_(*conditions)))).all()]

    async def expired_claims(self, now: datetime) -> list[TaskRecord]:
        table = records_table
        return await self._records(table.c.claim_state.in_(HELD), table.c.lease_until < now)

    async def held_by_others(self, agent: str, session: int) -> list[TaskRecord]:
        """The agent's claims that a turn of another session holds."""
        table = records_table
        return await self._records(
            table.c.agent == agent, table.c.claim_state.in_(HELD), table.c.session_generation != session
        )

    async def claimed_before(self, session: int) -> list[TaskRecord]:
        table = records_table
        return await self._records(table.c.claim_state.in_(HELD), table.c.session_generation < session)

    async def idle_deadlines(self) -> list[TaskRecord]:
        return await self._records(records_table.c.idle_expires_at.is_not(None))

    async def claim_events(self, task_id: str) -> list[dict[str, Any]]:
        await self._init()
        table = claim_events_table
        async with self.reader.connect() as conn:
            rows = (await conn.execute(select(table).where(table.c.task_id == task_id).order_by(table.c.id))).all()
        return [
            {
                "claim_generation": r.claim_generation, "operation": r.operation, "state": r.state,
                "evidence": r.evidence, "at": utc(r.at), "session_generation": r.session_generation,
                "lease_until": utc(r.lease_until),
            }
            for r in rows
        ]

    async def remember(self, agent: str, owner: str, message_id: str, sent: SentMessage) -> SentMessage | None:
        await self._init()
        known = await self._writes.submit(Remember((agent, owner, message_id), sent))
        assert not isinstance(known, TaskExists | Fenced)
        return known

    async def take_over(self, agent: str, owner: str, message_id: str, sender: int | None, session: int) -> bool:
        """Make `session` the sender of a message whose sender was `sender`, only if it still is: one replica wins."""
        await self._init()
        table = messages_table
        key = and_(table.c.agent == agent, table.c.owner == owner, table.c.message_id == message_id)
        same = table.c.session.is_(None) if sender is None else table.c.session == sender
        async with self.engine.begin() as conn:
            return (await conn.execute(update(table).where(and_(key, same)).values(session=session))).rowcount == 1

    async def settle(self, agent: str, owner: str, message_id: str, task_id: str | None, reply: str | None) -> None:
        await self._init()
        table = messages_table
        key = and_(table.c.agent == agent, table.c.owner == owner, table.c.message_id == message_id)
        async with self.engine.begin() as conn:
            await conn.execute(update(table).where(key).values(task_id=task_id, reply=reply))

    async def _write_many(self, writes: list[Write]) -> list[Outcome]:
        """One transaction for a batch (see `_write_batch`), refused while the store may not be written."""
        self.health.ensure_writable()
        try:
            results = await self._write_batch(writes)
        except Exception as error:
            if transient(error):
                self.health.wrote(error)
            raise
        self.health.wrote(None)
        return results

    async def _write_batch(self, writes: list[Write]) -> list[Outcome]:
        """One transaction for a batch (`_write_saves`); the tasks it may have changed are told to `on_written` once
        it is over, committed or not."""
        results: list[Outcome] = [None] * len(writes)
        saves = [(index, write) for index, write in enumerate(writes) if isinstance(write, Save)]
        remembered = [(index, write) for index, write in enumerate(writes) if isinstance(write, Remember)]
        changes = [(index, write) for index, write in enumerate(writes) if isinstance(write, Hold | Settle | Drop)]
        try:
            await self._write_saves(saves, remembered, results, changes)
        finally:
            if saves:
                self._tell_written([save.record["task_id"] for _, save in saves])
        if saves:
            self._announce()
        return results

    async def _write_saves(
        self, saves: list[tuple[int, Save]], remembered: list[tuple[int, Remember]], results: list[Outcome],
        changes: list[tuple[int, Change]],
    ) -> None:
        """The batch's transaction: each record (new ones only where absent, others only where not ended), then for the
        records written their task rows, claim events, event-log rows and push configs added, every new message, and
        the push outbox's row changes; `results` gets each refused save's refusal and each change's outcome. On SQLite
        in one trip to the connection's thread, commit included (`ledger_batch.SqliteBatch`); on PostgreSQL through
        asyncpg directly, each statement's rows in one trip (`pg_batch.PgBatch`)."""
        if self._sqlite is not None:
            async with self.engine.connect() as conn:
                await self._sqlite.run(conn, saves, remembered, results, changes)
            return
        assert self._pg is not None
        conn, self._writer = self._writer or await self.engine.connect(), None
        if self._writer_pid is None:
            driver = (await conn.get_raw_connection()).driver_connection
            self._writer_pid = driver.get_server_pid()
            driver.add_termination_listener(self._writer_gone)
        try:
            written = await self._pg.run(conn, saves, remembered, results, changes)
        except BaseException:
            self._writer_pid = None
            with contextlib.suppress(Exception):  # a lost connection may fail to close; the pool drops it either way
                await conn.close()
            raise
        self._writer = conn
        self._told_here(sorted({task_id for task_id, _ in written}))

    def _writer_gone(self, _connection: object) -> None:
        """The writer's backend ended (killed, or its connection lost while idle): its pid may go to another backend,
        whose notices are not this process's."""
        self._writer_pid = None

    def _told_here(self, task_ids: list[str]) -> None:
        """The "t" notices of a batch this process committed, told to its own listeners as its NOTIFYs would be (the
        rest of what hearing them did, `_tell_written` and `_announce`, `_write_batch` does): a turn's claim-only write
        wakes a waiter here as before. Its "e" notices are not: a feed here that follows the task rereads the log."""
        for task_id in task_ids:
            for notice in self._notices:
                notice("t", task_id, "")

    async def _write_one(self, write: Write) -> Outcome:
        """A write alone; a message another replica inserted first is answered from its row."""
        try:
            return (await self._write_many([write]))[0]
        except IntegrityError:
            if not isinstance(write, Remember):
                raise
            return (await self._write_many([write]))[0]
