"""What the bridge stores beside the SDK's tasks: per-task records (status view and claim), claim events, sent messages, sessions."""

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

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
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from a2a_bridge.claims import Claim
from a2a_bridge.task_status import Notification

metadata = MetaData()

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


@dataclass(frozen=True)
class SentMessage:
    """A message a caller already sent, for idempotent retries."""

    fingerprint: str
    task_id: str | None
    reply: str | None


class Ledger(Protocol):
    async def start_session(self, now: datetime) -> int: ...
    async def get(self, task_id: str) -> TaskRecord | None: ...
    async def put(self, record: TaskRecord) -> None: ...
    async def add_claim_event(self, task_id: str, generation: int, operation: str, state: str, evidence: dict[str, Any], at: datetime) -> None: ...
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


class SqlLedger:
    """The ledger in the same database as the tasks (SQLite or PostgreSQL)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._ready = False

    async def _init(self) -> None:
        if not self._ready:
            async with self.engine.begin() as conn:
                await conn.run_sync(metadata.create_all)
            self._ready = True

    async def start_session(self, now: datetime) -> int:
        await self._init()
        async with self.engine.begin() as conn:
            result = await conn.execute(insert(sessions_table).values(started_at=now))
            return int(result.inserted_primary_key[0])

    async def get(self, task_id: str) -> TaskRecord | None:
        await self._init()
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(records_table).where(records_table.c.task_id == task_id))).first()
        return _record(row) if row is not None else None

    async def put(self, record: TaskRecord) -> None:
        await self._init()
        values = _row_values(record)
        async with self.engine.begin() as conn:
            updated = await conn.execute(
                update(records_table).where(records_table.c.task_id == record.task_id).values(**values)
            )
            if updated.rowcount == 0:
                await conn.execute(insert(records_table).values(**values))

    async def add_claim_event(
        self, task_id: str, generation: int, operation: str, state: str, evidence: dict[str, Any], at: datetime
    ) -> None:
        await self._init()
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(claim_events_table).values(
                    task_id=task_id, claim_generation=generation, operation=operation, state=state, evidence=evidence, at=at
                )
            )

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
        table = messages_table
        key = and_(table.c.agent == agent, table.c.owner == owner, table.c.message_id == message_id)
        try:
            async with self.engine.begin() as conn:
                await conn.execute(
                    insert(table).values(
                        agent=agent, owner=owner, message_id=message_id, fingerprint=sent.fingerprint,
                        task_id=sent.task_id, reply=sent.reply,
                    )
                )
            return None
        except IntegrityError:
            async with self.engine.connect() as conn:
                row = (await conn.execute(select(table).where(key))).first()
            assert row is not None
            return SentMessage(row.fingerprint, row.task_id, row.reply)

    async def settle(self, agent: str, owner: str, message_id: str, task_id: str | None, reply: str | None) -> None:
        await self._init()
        table = messages_table
        key = and_(table.c.agent == agent, table.c.owner == owner, table.c.message_id == message_id)
        async with self.engine.begin() as conn:
            await conn.execute(update(table).where(key).values(task_id=task_id, reply=reply))


class MemoryLedger:
    """The ledger for `--store memory`: the same contract, in dictionaries."""

    def __init__(self) -> None:
        self._records: dict[str, TaskRecord] = {}
        self._events: dict[str, list[dict[str, Any]]] = {}
        self._messages: dict[tuple[str, str, str], SentMessage] = {}
        self._sessions = 0

    async def start_session(self, now: datetime) -> int:
        self._sessions += 1
        return self._sessions

    async def get(self, task_id: str) -> TaskRecord | None:
        record = self._records.get(task_id)
        return replace(record, notifications=list(record.notifications)) if record is not None else None

    async def put(self, record: TaskRecord) -> None:
        self._records[record.task_id] = replace(record, notifications=list(record.notifications))

    async def add_claim_event(
        self, task_id: str, generation: int, operation: str, state: str, evidence: dict[str, Any], at: datetime
    ) -> None:
        self._events.setdefault(task_id, []).append(
            {"claim_generation": generation, "operation": operation, "state": state, "evidence": evidence, "at": at}
        )

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
