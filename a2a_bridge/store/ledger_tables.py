"""The ledger's tables beside the SDK's, and the rows a record, a claim event and an SDK task are written as."""

import functools
import json
from datetime import UTC, datetime
from typing import Any

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
    literal_column,
    or_,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert

from a2a_bridge.core.claims import TERMINAL, Claim
from a2a_bridge.core.task_status import Notification
from a2a_bridge.store.ledger import ClaimEvent, Delivery, TaskRecord
from a2a_bridge.store.proto_json import to_dict

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
    Column("version", Integer, nullable=False, server_default=text("0")),
)
"""`version` is the record's fencing token (`TaskRecord.version`); it was added after the table, so a database made
before it gets the column at start (`SqlLedger`)."""

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
    Column("session", Integer, nullable=True),
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

deliveries_table = Table(
    "bridge_push_deliveries",
    metadata,
    Column("task_id", String(64), primary_key=True),
    Column("config_id", String(255), primary_key=True),
    Column("agent", String(64), nullable=False, index=True),
    Column("delivered", Integer, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("due_at", DateTime(timezone=True), nullable=False, index=True),
    Column("failing_since", DateTime(timezone=True), nullable=True),
    Column("dead", Boolean, nullable=False),
    Column("last_error", String(255), nullable=True),
    Column("holder", Integer, nullable=True),
    Column("held_until", DateTime(timezone=True), nullable=True),
    Column("holds", Integer, nullable=False),
)
"""The outbox of push notifications: one row per task and push config, the revision delivered up to; what is still to
deliver is the task's event log after it (`events_table`), written in the same transaction as the events."""

sessions_table = Table(
    "bridge_sessions",
    metadata,
    Column("generation", Integer, primary_key=True, autoincrement=True),
    Column("started_at", DateTime(timezone=True), nullable=False),
)


def utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every time in the bridge is aware UTC."""
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def row_values(record: TaskRecord) -> dict[str, Any]:
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
        "version": record.version,
    }


def record_of(row: Any) -> TaskRecord:
    notifications = row.notifications if not isinstance(row.notifications, str) else json.loads(row.notifications)
    return TaskRecord(
        task_id=row.task_id,
        agent=row.agent,
        owner=row.owner,
        responsible_user=row.responsible_user,
        created_at=utc(row.created_at),  # type: ignore[arg-type]
        state=row.state,
        revision=row.revision,
        notifications=[
            Notification(n["kind"], datetime.fromisoformat(n["since"]), n.get("provider")) for n in notifications
        ],
        idle_expires_at=utc(row.idle_expires_at),
        claim=Claim(
            state=row.claim_state,
            claim_generation=row.claim_generation,
            session_generation=row.session_generation,
            lease_until=utc(row.lease_until),
            cancellation_requested=row.cancellation_requested,
            stage=row.stage,
        ),
        signal=row.signal,
        version=row.version,
    )


def delivery_row(delivery: Delivery) -> dict[str, Any]:
    return delivery._asdict()


def delivery_of(row: Any) -> Delivery:
    return Delivery(
        row.task_id, row.config_id, row.agent, row.delivered, row.attempts, utc(row.due_at), utc(row.failing_since),
        row.dead, row.last_error, row.holder, utc(row.held_until), row.holds,
    )


def delivery_key(delivery: Delivery) -> tuple[Any, Any]:
    """The conditions that name one outbox row."""
    table = deliveries_table
    return (table.c.task_id == delivery.task_id, table.c.config_id == delivery.config_id)


def event_rows(events: list[ClaimEvent]) -> list[dict[str, Any]]:
    return [event.row() for event in events]


def task_row(task: Task, owner: str) -> dict[str, Any]:
    """The row of the SDK's task table for a task, column for column as the SDK's `DatabaseTaskStore._to_orm` maps it
    (tests/store/test_group_commit.py holds the two equal), written with the faster `proto_json.to_dict`."""
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
def upsert_statement(dialect: str, table: Table) -> Insert:
    """INSERT, or UPDATE of every other column where the primary key exists (SQLite and PostgreSQL)."""
    statement = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)
    keys = {column.name for column in table.primary_key.columns}
    return statement.on_conflict_do_update(
        index_elements=sorted(keys),
        set_={column.name: statement.excluded[column.name] for column in table.columns if column.name not in keys},
    )


@functools.cache
def added_delivery_statement(dialect: str) -> Insert:
    """The outbox row of a push config added to a task, unless the task and config have one."""
    statement = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(deliveries_table)
    return statement.on_conflict_do_nothing(index_elements=["task_id", "config_id"])


@functools.cache
def record_statement(dialect: str, new: bool) -> Insert:
    """The record write that returns the ids it wrote: a new record only where none is stored, any other only over
    the version its writer holds (the stored version one below the written: the fence, `ledger.writable`) and only
    where the stored record has not ended (a terminal task is never changed again) or where the claim that ended it
    writes that same end again (a save of events folded before the end, stored after it: `ledger.rewrites_end`). The
    ended states are written into the statement: an expanding parameter cannot go with the many rows of a batch."""
    table = records_table
    statement = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)
    if new:
        return statement.on_conflict_do_nothing(index_elements=["task_id"]).returning(table.c.task_id)
    stored, written = table.name, statement.excluded
    open_claim = text(f"{stored}.claim_state NOT IN ({', '.join(repr(state) for state in sorted(TERMINAL))})")
    same_end = and_(
        table.c.claim_state == written.claim_state,
        table.c.claim_generation == written.claim_generation,
        table.c.session_generation == written.session_generation,
        table.c.revision <= written.revision,
    )
    return statement.on_conflict_do_update(
        index_elements=["task_id"],
        set_={column.name: written[column.name] for column in table.columns if column.name != "task_id"},
        where=and_(table.c.version == written.version - literal_column("1"), or_(open_claim, same_end)),
    ).returning(table.c.task_id)
