"""What the bridge stores beside the SDK's tasks: per-task records (status view and claim), claim events, sent messages, sessions."""

import functools
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from a2a.server.context import ServerCallContext
from a2a.server.tasks import DatabaseTaskStore, TaskStore
from a2a.types import Task
from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    delete,
    insert,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.dml import Insert

from a2a_bridge.claims import Claim
from a2a_bridge.group_commit import GroupCommit
from a2a_bridge.proto_json import to_dict
from a2a_bridge.store_faults import StoreHealth, transient
from a2a_bridge.task_status import Notification

metadata = MetaData()

SESSION_LOCKS = 0x4132
"""The advisory-lock namespace of session generations on PostgreSQL."""

records_table = Table(
    "bridge_tasks",
    metadata,
    Column("task_id", String(64), primary_key=True),
    Column("agent", String(64), nullable=False, index=True),
    Column("owner", String(255), nullable=False),
    Column("responsible_user", String(255), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("state", String(40), nullable=False),
    Column("notifications", JSON, nullable=False),
    Column("idle_expires_at", DateTime(timezone=True), nullable=True, index=True),
    Column("claim_state", String(40), nullable=False, index=True),
    Column("claim_generation", Integer, nullable=False),
    Column("session_generation", Integer, nullable=False),
    Column("lease_until", DateTime(timezone=True), nullable=True),
    Column("cancellation_requested", Boolean, nullable=False),
    Column("stage", String(255), nullable=True),
    Column("signal", String(255), nullable=True),
)

claim_events_table = Table(
    "bridge_claim_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", String(64), nullable=False, index=True),
    Column("claim_generation", Integer, nullable=False),
    Column("operation", String(40), nullable=False),
    Column("state", String(40), nullable=False),
    Column("evidence", JSON, nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
)

messages_table = Table(
    "bridge_messages",
    metadata,
    Column("agent", String(64), primary_key=True),
    Column("owner", String(255), primary_key=True),
    Column("message_id", String(255), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("task_id", String(64), nullable=True),
    Column("reply", Text, nullable=True),
)

requests_table = Table(
    "bridge_requests",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", String(64), nullable=False, index=True),
    Column("kind", String(40), nullable=False),
    Column("requested_by", String(255), nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
)

events_table = Table(
    "bridge_events",
    metadata,
    Column("task_id", String(64), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("body", Text, nullable=False),
)

sessions_table = Table(
    "bridge_sessions",
    metadata,
    Column("generation", Integer, primary_key=True, autoincrement=True),
    Column("started_at", DateTime(timezone=True), nullable=False),
)


@dataclass
class TaskRecord:
    """The bridge's row for one task: who it is for, its status-view fields and its claim."""

    task_id: str
    agent: str
    owner: str
    responsible_user: str
    created_at: datetime
    state: str
    revision: int = 0
    notifications: list[Notification] = field(default_factory=list)
    idle_expires_at: datetime | None = None
    claim: Claim = field(default_factory=Claim)
    signal: str | None = None
    """What resumed the current turn when it was not a user message (an operator's approval)."""

    def copy(self) -> "TaskRecord":
        """A copy that shares no mutable part with this record."""
        return TaskRecord(
            self.task_id, self.agent, self.owner, self.responsible_user, self.created_at, self.state, self.revision,
            list(self.notifications), self.idle_expires_at, self.claim, self.signal,
        )


@dataclass(frozen=True)
class SentMessage:
    """A message a caller already sent, for idempotent retries."""

    fingerprint: str
    task_id: str | None
    reply: str | None


@dataclass(frozen=True)
class ClaimEvent:
    """One claim operation posted for a task, with its evidence."""

    task_id: str
    claim_generation: int
    operation: str
    state: str
    evidence: dict[str, Any]
    at: datetime

    def row(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "claim_generation": self.claim_generation,
            "operation": self.operation,
            "state": self.state,
            "evidence": self.evidence,
            "at": self.at,
        }


@dataclass(frozen=True)
class Request:
    """A request another replica left for the replica that runs a task (a cancel)."""

    task_id: str
    kind: str
    requested_by: str


class Ledger(Protocol):
    shared: bool
    """True where several server processes may share the database (PostgreSQL)."""

    async def start_session(self, now: datetime) -> int: ...
    async def session_alive(self, session: int) -> bool: ...
    async def close(self) -> None: ...
    async def get(self, task_id: str) -> TaskRecord | None: ...
    async def recent(self, limit: int) -> list[TaskRecord]: ...
    async def save(self, store: TaskStore, task: Task, context: ServerCallContext, record: TaskRecord, events: list[ClaimEvent]) -> None: ...
    async def put(self, record: TaskRecord, events: list[ClaimEvent]) -> None: ...
    async def put_if(self, record: TaskRecord, expected: Claim, events: list[ClaimEvent]) -> bool: ...
    async def add_request(self, request: Request, at: datetime) -> None: ...
    async def take_requests(self, task_ids: list[str]) -> list[Request]: ...
    async def append_event(self, task_id: str, seq: int, body: str) -> None: ...
    async def events_after(self, task_id: str, seq: int) -> list[tuple[int, str]]: ...
    async def expired_claims(self, now: datetime) -> list[TaskRecord]: ...
    async def claim_events(self, task_id: str) -> list[dict[str, Any]]: ...
    async def claimed_before(self, session: int) -> list[TaskRecord]: ...
    async def idle_deadlines(self) -> list[TaskRecord]: ...
    async def remember(self, agent: str, owner: str, message_id: str, sent: SentMessage) -> SentMessage | None: ...
    async def settle(self, agent: str, owner: str, message_id: str, task_id: str | None, reply: str | None) -> None: ...


def _utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every time in the bridge is aware UTC."""
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _row_values(record: TaskRecord) -> dict[str, Any]:
    claim = record.claim
    return {
        "task_id": record.task_id,
        "agent": record.agent,
        "owner": record.owner,
        "responsible_user": record.responsible_user,
        "created_at": record.created_at,
        "revision": record.revision,
        "state": record.state,
        "notifications": [
            {"kind": n.kind, "since": n.since.isoformat(), "provider": n.provider} for n in record.notifications
        ],
        "idle_expires_at": record.idle_expires_at,
        "claim_state": claim.state,
        "claim_generation": claim.claim_generation,
        "session_generation": claim.session_generation,
        "lease_until": claim.lease_until,
        "cancellation_requested": claim.cancellation_requested,
        "stage": claim.stage,
        "signal": record.signal,
    }


def _record(row: Any) -> TaskRecord:
    notifications = row.notifications if not isinstance(row.notifications, str) else json.loads(row.notifications)
    return TaskRecord(
        task_id=row.task_id,
        agent=row.agent,
        owner=row.owner,
        responsible_user=row.responsible_user,
        created_at=_utc(row.created_at),  # type: ignore[arg-type]
        state=row.state,
        revision=row.revision,
        notifications=[
            Notification(n["kind"], datetime.fromisoformat(n["since"]), n.get("provider")) for n in notifications
        ],
        idle_expires_at=_utc(row.idle_expires_at),
        claim=Claim(
            state=row.claim_state,
            claim_generation=row.claim_generation,
            session_generation=row.session_generation,
            lease_until=_utc(row.lease_until),
            cancellation_requested=row.cancellation_requested,
            stage=row.stage,
        ),
        signal=row.signal,
    )


def _event_rows(events: list[ClaimEvent]) -> list[dict[str, Any]]:
    return [event.row() for event in events]


def task_row(task: Task, owner: str) -> dict[str, Any]:
    """The row of the SDK's task table for a task, column for column as the SDK's `DatabaseTaskStore._to_orm` maps it
    (tests/test_group_commit.py holds the two equal), written with the faster `proto_json.to_dict`."""
    return {
        "id": task.id,
        "context_id": task.context_id,
        "kind": "task",
        "owner": owner,
        "last_updated": task.status.timestamp.ToDatetime() if task.status.HasField("timestamp") else None,
        "status": to_dict(task.status),
        "artifacts": [to_dict(artifact) for artifact in task.artifacts],
        "history": [to_dict(message) for message in task.history],
        "protocol_version": "1.0",
        "metadata": to_dict(task.metadata) if task.metadata.fields else None,
    }


@functools.cache
def _upsert_statement(dialect: str, table: Table) -> Insert:
    """INSERT, or UPDATE of every other column where the primary key exists (SQLite and PostgreSQL)."""
    statement = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)
    keys = {column.name for column in table.primary_key.columns}
    return statement.on_conflict_do_update(
        index_elements=sorted(keys),
        set_={column.name: statement.excluded[column.name] for column in table.columns if column.name not in keys},
    )


@dataclass(frozen=True)
class _Save:
    """A task row (absent for a record-only write), its record row and the claim events it posted."""

    table: Table | None
    task: dict[str, Any] | None
    record: dict[str, Any]
    events: list[dict[str, Any]]


@dataclass(frozen=True)
class _Remember:
    """A message sent under (agent, owner, messageId), unless it was sent before."""

    key: tuple[str, str, str]
    sent: SentMessage


_Write = _Save | _Remember


class SqlLedger:
    """The ledger in the same database as the tasks: SQLite (one process) or PostgreSQL (shared by replicas)."""

    def __init__(self, engine: AsyncEngine, health: StoreHealth | None = None) -> None:
        self.engine = engine
        self.health = health or StoreHealth()
        self.shared = engine.dialect.name == "postgresql"
        self._ready = False
        self._session_lock: AsyncConnection | None = None
        self._writes: GroupCommit[_Write, SentMessage | None] = GroupCommit(self._write_many, self._write_one)

    async def _init(self) -> None:
        if not self._ready:
            async with self.engine.begin() as conn:
                await conn.run_sync(metadata.create_all)
            self._ready = True

    async def start_session(self, now: datetime) -> int:
        """A new session generation; on PostgreSQL the process holds an advisory lock on it while it lives."""
        await self._init()
        async with self.engine.begin() as conn:
            result = await conn.execute(insert(sessions_table).values(started_at=now))
            session = int(result.inserted_primary_key[0])
        if self.shared:
            self._session_lock = await self.engine.connect()
            await self._session_lock.execute(text("SELECT pg_advisory_lock(:ns, :id)"), {"ns": SESSION_LOCKS, "id": session})
            await self._session_lock.commit()
        return session

    async def session_alive(self, session: int) -> bool:
        """Whether the process of a session still runs: on SQLite only one process uses the file, so none other does."""
        if not self.shared:
            return False
        async with self.engine.connect() as conn:
            params = {"ns": SESSION_LOCKS, "id": session}
            taken = (await conn.execute(text("SELECT pg_try_advisory_lock(:ns, :id)"), params)).scalar_one()
            if taken:
                await conn.execute(text("SELECT pg_advisory_unlock(:ns, :id)"), params)
            await conn.commit()
        return not taken

    async def close(self) -> None:
        await self._writes.close()
        if self._session_lock is not None:
            await self._session_lock.close()
            self._session_lock = None

    async def get(self, task_id: str) -> TaskRecord | None:
        await self._init()
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(records_table).where(records_table.c.task_id == task_id))).first()
        return _record(row) if row is not None else None

    async def recent(self, limit: int) -> list[TaskRecord]:
        """At most `limit` records of every agent, the most recently created first."""
        await self._init()
        table = records_table
        query = select(table).order_by(table.c.created_at.desc(), table.c.task_id).limit(limit)
        async with self.engine.connect() as conn:
            return [_record(r) for r in (await conn.execute(query)).all()]

    async def save(
        self, store: TaskStore, task: Task, context: ServerCallContext, record: TaskRecord, events: list[ClaimEvent]
    ) -> None:
        """Store the SDK task, its record and the claim events it posted in one transaction (shared with the other
        writes of the moment: see group_commit)."""
        await self._init()
        if not isinstance(store, DatabaseTaskStore):
            await store.save(task, context)
            await self.put(record, events)
            return
        row = task_row(task, store.owner_resolver(context))
        await self._writes.submit(_Save(store.task_model.__table__, row, _row_values(record), _event_rows(events)))

    async def put(self, record: TaskRecord, events: list[ClaimEvent]) -> None:
        await self._init()
        await self._writes.submit(_Save(None, None, _row_values(record), _event_rows(events)))

    async def put_if(self, record: TaskRecord, expected: Claim, events: list[ClaimEvent]) -> bool:
        """Store the record only if its claim is still `expected` (generation and state): one replica wins."""
        await self._init()
        self.health.ensure_writable()
        table = records_table
        async with self.engine.begin() as conn:
            updated = await conn.execute(
                update(table)
                .where(
                    and_(
                        table.c.task_id == record.task_id,
                        table.c.claim_generation == expected.claim_generation,
                        table.c.claim_state == expected.state,
                    )
                )
                .values(**_row_values(record))
            )
            if updated.rowcount != 1:
                return False
            if events:
                await conn.execute(insert(claim_events_table), [event.row() for event in events])
            return True

    async def add_request(self, request: Request, at: datetime) -> None:
        await self._init()
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(requests_table).values(
                    task_id=request.task_id, kind=request.kind, requested_by=request.requested_by, at=at
                )
            )

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

    async def append_event(self, task_id: str, seq: int, body: str) -> None:
        await self._init()
        async with self.engine.begin() as conn:
            await conn.execute(insert(events_table).values(task_id=task_id, seq=seq, body=body))

    async def events_after(self, task_id: str, seq: int) -> list[tuple[int, str]]:
        await self._init()
        table = events_table
        query = select(table.c.seq, table.c.body).where(and_(table.c.task_id == task_id, table.c.seq > seq))
        async with self.engine.connect() as conn:
            return [(r.seq, r.body) for r in (await conn.execute(query.order_by(table.c.seq))).all()]

    async def expired_claims(self, now: datetime) -> list[TaskRecord]:
        await self._init()
        table = records_table
        query = select(table).where(
            and_(table.c.claim_state.in_(("claimed", "cancel_requested")), table.c.lease_until < now)
        )
        async with self.engine.connect() as conn:
            return [_record(r) for r in (await conn.execute(query)).all()]

    async def claim_events(self, task_id: str) -> list[dict[str, Any]]:
        await self._init()
        table = claim_events_table
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(table).where(table.c.task_id == task_id).order_by(table.c.id))).all()
        return [
            {
                "claim_generation": r.claim_generation,
                "operation": r.operation,
                "state": r.state,
                "evidence": r.evidence,
                "at": _utc(r.at),
            }
            for r in rows
        ]

    async def claimed_before(self, session: int) -> list[TaskRecord]:
        await self._init()
        table = records_table
        query = select(table).where(
            and_(table.c.claim_state.in_(("claimed", "cancel_requested")), table.c.session_generation < session)
        )
        async with self.engine.connect() as conn:
            return [_record(r) for r in (await conn.execute(query)).all()]

    async def idle_deadlines(self) -> list[TaskRecord]:
        await self._init()
        query = select(records_table).where(records_table.c.idle_expires_at.is_not(None))
        async with self.engine.connect() as conn:
            return [_record(r) for r in (await conn.execute(query)).all()]

    async def remember(self, agent: str, owner: str, message_id: str, sent: SentMessage) -> SentMessage | None:
        await self._init()
        return await self._writes.submit(_Remember((agent, owner, message_id), sent))

    async def _write_many(self, writes: list["_Write"]) -> list[SentMessage | None]:
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

    async def _write_batch(self, writes: list["_Write"]) -> list[SentMessage | None]:
        """One transaction for a batch: each task's and record's last row, every claim event, every new message."""
        results: list[SentMessage | None] = [None] * len(writes)
        tasks: dict[Table, dict[str, dict[str, Any]]] = {}
        records: dict[str, dict[str, Any]] = {}
        events: list[dict[str, Any]] = []
        remembered: list[tuple[int, _Remember]] = []
        for index, write in enumerate(writes):
            if isinstance(write, _Remember):
                remembered.append((index, write))
                continue
            if write.table is not None and write.task is not None:
                tasks.setdefault(write.table, {})[write.task["id"]] = write.task
            records[write.record["task_id"]] = write.record
            events += write.events
        async with self.engine.begin() as conn:
            if remembered:
                await self._remember_all(conn, remembered, results)
            for table, rows in tasks.items():
                await conn.execute(self._upsert(table), list(rows.values()))
            if records:
                await conn.execute(self._upsert(records_table), list(records.values()))
            if events:
                await conn.execute(insert(claim_events_table), events)
        return results

    async def _remember_all(
        self, conn: AsyncConnection, remembered: list[tuple[int, "_Remember"]], results: list[SentMessage | None]
    ) -> None:
        """Insert the messages not sent before; the others get what their first send stored."""
        table = messages_table
        keys = [write.key for _, write in remembered]
        query = select(table).where(tuple_(table.c.agent, table.c.owner, table.c.message_id).in_(keys))
        known = {
            (row.agent, row.owner, row.message_id): SentMessage(row.fingerprint, row.task_id, row.reply)
            for row in (await conn.execute(query)).all()
        }
        fresh: list[dict[str, Any]] = []
        for index, write in remembered:
            if write.key in known:
                results[index] = known[write.key]
                continue
            known[write.key] = write.sent
            agent, owner, message_id = write.key
            fresh.append({
                "agent": agent, "owner": owner, "message_id": message_id, "fingerprint": write.sent.fingerprint,
                "task_id": write.sent.task_id, "reply": write.sent.reply,
            })
        if fresh:
            await conn.execute(insert(table), fresh)

    async def _write_one(self, write: "_Write") -> SentMessage | None:
        """A write alone; a message another replica inserted first is answered from its row."""
        try:
            return (await self._write_many([write]))[0]
        except IntegrityError:
            if not isinstance(write, _Remember):
                raise
            return (await self._write_many([write]))[0]

    def _upsert(self, table: Table) -> Insert:
        return _upsert_statement(self.engine.dialect.name, table)

    async def settle(self, agent: str, owner: str, message_id: str, task_id: str | None, reply: str | None) -> None:
        await self._init()
        table = messages_table
        key = and_(table.c.agent == agent, table.c.owner == owner, table.c.message_id == message_id)
        async with self.engine.begin() as conn:
            await conn.execute(update(table).where(key).values(task_id=task_id, reply=reply))


class MemoryLedger:
    """The ledger for `--store memory`: the same contract, in dictionaries."""

    shared = False

    def __init__(self) -> None:
        self._records: dict[str, TaskRecord] = {}
        self._events: dict[str, list[dict[str, Any]]] = {}
        self._messages: dict[tuple[str, str, str], SentMessage] = {}
        self._sessions = 0

    async def start_session(self, now: datetime) -> int:
        self._sessions += 1
        return self._sessions

    async def session_alive(self, session: int) -> bool:
        return False

    async def close(self) -> None:
        return None

    async def save(
        self, store: TaskStore, task: Task, context: ServerCallContext, record: TaskRecord, events: list[ClaimEvent]
    ) -> None:
        await store.save(task, context)
        await self.put(record, events)

    async def put_if(self, record: TaskRecord, expected: Claim, events: list[ClaimEvent]) -> bool:
        current = self._records.get(record.task_id)
        if current is None or (current.claim.claim_generation, current.claim.state) != (
            expected.claim_generation,
            expected.state,
        ):
            return False
        await self.put(record, events)
        return True

    async def add_request(self, request: Request, at: datetime) -> None:
        raise NotImplementedError("a memory store is never shared by replicas")

    async def take_requests(self, task_ids: list[str]) -> list[Request]:
        return []

    async def append_event(self, task_id: str, seq: int, body: str) -> None:
        raise NotImplementedError("a memory store is never shared by replicas")

    async def events_after(self, task_id: str, seq: int) -> list[tuple[int, str]]:
        return []

    async def expired_claims(self, now: datetime) -> list[TaskRecord]:
        return [
            r for r in self._records.values()
            if r.claim.state in ("claimed", "cancel_requested") and r.claim.lease_until is not None and r.claim.lease_until < now
        ]

    async def get(self, task_id: str) -> TaskRecord | None:
        record = self._records.get(task_id)
        return record.copy() if record is not None else None

    async def recent(self, limit: int) -> list[TaskRecord]:
        newest = sorted(self._records.values(), key=lambda r: (-r.created_at.timestamp(), r.task_id))[:limit]
        return [r.copy() for r in newest]

    async def put(self, record: TaskRecord, events: list[ClaimEvent]) -> None:
        self._records[record.task_id] = record.copy()
        for event in events:
            row = event.row()
            del row["task_id"]
            self._events.setdefault(event.task_id, []).append(row)

    async def claim_events(self, task_id: str) -> list[dict[str, Any]]:
        return list(self._events.get(task_id, []))

    async def claimed_before(self, session: int) -> list[TaskRecord]:
        return [
            r for r in self._records.values()
            if r.claim.state in ("claimed", "cancel_requested") and r.claim.session_generation < session
        ]

    async def idle_deadlines(self) -> list[TaskRecord]:
        return [r for r in self._records.values() if r.idle_expires_at is not None]

    async def remember(self, agent: str, owner: str, message_id: str, sent: SentMessage) -> SentMessage | None:
        key = (agent, owner, message_id)
        if key in self._messages:
            return self._messages[key]
        self._messages[key] = sent
        return None

    async def settle(self, agent: str, owner: str, message_id: str, task_id: str | None, reply: str | None) -> None:
        key = (agent, owner, message_id)
        self._messages[key] = SentMessage(self._messages[key].fingerprint, task_id, reply)
