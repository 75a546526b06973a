"""The ledger's tables beside the SDK's, and the rows a record, a claim event and an SDK task are written as."""

import functools
import json
from datetime import UTC, datetime
from typing import Any

from a2a.types import Task
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    bindparam,
    func,
    inspect,
    literal_column,
    or_,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.sql.dml import Insert

from a2a_bridge.core.claims import TERMINAL, Claim
from a2a_bridge.core.task_status import Notification
from a2a_bridge.store.ledger import ClaimEvent, Delivery, TaskRecord
from a2a_bridge.store.column_json import JsonText
from a2a_bridge.store.item_texts import TaskTexts
from a2a_bridge.store.proto_json import to_dict

metadata = MetaData()

SESSION_LOCKS = 0x4132
"""The advisory-lock namespace of session generations on PostgreSQL."""

records_table = Table(
    "bridge_tasks",
    metadata,
    Column("task_id", String(64), primary_key=True),
    Column("agent", String(64), nullable=False),
    Column("owner", String(255), nullable=False),
    Column("responsible_user", String(255), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("state", String(40), nullable=False),
    Column("notifications", JSON, nullable=False),
    Column("idle_expires_at", DateTime(timezone=True), nullable=True, index=True),
    Column("claim_state", String(40), nullable=False),
    Column("claim_generation", Integer, nullable=False),
    Column("session_generation", Integer, nullable=False),
    Column("lease_until", DateTime(timezone=True), nullable=True),
    Column("cancellation_requested", Boolean, nullable=False),
    Column("stage", String(255), nullable=True),
    Column("signal", String(255), nullable=True),
    Column("version", Integer, nullable=False, server_default=text("0")),
    Column("stored_bytes", BigInteger, nullable=False, server_default=text("0")),
    Index("ix_bridge_tasks_owner_bytes", "owner", "stored_bytes"),
)
"""`version` is the record's fencing token (`TaskRecord.version`), `stored_bytes` the task's size as stored, summed by
owner over the index on (owner, stored_bytes) for `max_stored_bytes`; both were added after the table, so a database
made before them gets the columns (and the index) at start (`SqlLedger`). No index of `agent` or `claim_state` alone:
`ADDED_INDEXES` begin with each, and every save whose claim moves changed each index of `claim_state` (a database made
before keeps its two, which serve the same reads: no index is dropped under running replicas)."""

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
    Column("session_generation", Integer, nullable=True),
    Column("lease_until", DateTime(timezone=True), nullable=True),
)
"""`session_generation` and `lease_until` are the claim's after the operation (the console's timeline shows them);
added after the table, so a database made before gets them at start (`SqlLedger`), and its older events have none."""

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
"""The event log: the events of each save that logs them in one row, under the save's last revision (`event_rows`)."""

deliveries_table = Table(
    "bridge_push_deliveries",
    metadata,
    Column("task_id", String(64), primary_key=True),
    Column("config_id", String(255), primary_key=True),
    Column("agent", String(64), nullable=False),
    Column("delivered", Integer, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("due_at", DateTime(timezone=True), nullable=False),
    Column("failing_since", DateTime(timezone=True), nullable=True),
    Column("dead", Boolean, nullable=False),
    Column("last_error", String(255), nullable=True),
    Column("holder", Integer, nullable=True),
    Column("held_until", DateTime(timezone=True), nullable=True),
    Column("holds", Integer, nullable=False),
    Index("ix_bridge_push_deliveries_agent_due", "agent", "due_at"),
)
"""The outbox of push notifications: one row per task and push config, the revision delivered up to; what is still to
deliver is the task's event log after it (`events_table`), written in the same transaction as the events. One index
beside the key, by agent and due time (the due rows of an agent in order, an agent's rows): each row is added and
removed once per task, and an index more cost both (a database made before keeps its two indexes, by agent and by
due time, which serve the same reads)."""

ADDED_INDEXES = (
    Index("ix_bridge_tasks_overview", records_table.c.agent, records_table.c.state, records_table.c.claim_state),
    Index("ix_bridge_tasks_lease", records_table.c.claim_state, records_table.c.lease_until),
    Index("ix_bridge_tasks_created", records_table.c.created_at.desc(), records_table.c.task_id),
    Index("ix_bridge_claim_events_operation_at", claim_events_table.c.operation, claim_events_table.c.at),
)
"""Indexes of the operator's overview (`ledger_views`) and list: the counts by agent, A2A state and claim state read
from one index, claims past their lease and the failures of the last hour found without a scan, the newest tasks
first without a sort. Added after their tables, so a
database made before gets them at start (`add_indexes`)."""


def add_indexes(conn: Any) -> None:
    """Create the indexes of ADDED_INDEXES a database lacks (run on a synchronous connection)."""
    for index in ADDED_INDEXES:
        index.create(conn, checkfirst=True)


sessions_table = Table(
    "bridge_sessions",
    metadata,
    Column("generation", Integer, primary_key=True, autoincrement=True),
    Column("started_at", DateTime(timezone=True), nullable=False),
)


ADDED_COLUMNS = (
    (messages_table.name, "session", "INTEGER"),
    (records_table.name, "version", "INTEGER NOT NULL DEFAULT 0"),
    (records_table.name, "stored_bytes", "BIGINT NOT NULL DEFAULT 0"),
    (claim_events_table.name, "session_generation", "INTEGER"),
    (claim_events_table.name, "lease_until", "TIMESTAMP WITH TIME ZONE"),
)
"""Columns added to a table after it was first made: (table, column, type); a database made before gets them at start,
with the indexes of `records_table` (`create_all` makes no index of a table it finds made)."""
STORED_BYTES = select(func.coalesce(func.sum(records_table.c.stored_bytes), 0)).where(
    records_table.c.owner == bindparam("owner")
)
"""The stored bytes of one owner's tasks, summed over the index on (owner, stored_bytes)."""


def missing_columns(conn: Connection) -> list[tuple[str, str, str]]:
    """The columns of ADDED_COLUMNS that this database's tables lack."""
    inspector = inspect(conn)
    present = {table: {column["name"] for column in inspector.get_columns(table)} for table, _, _ in ADDED_COLUMNS}
    return [(table, column, kind) for table, column, kind in ADDED_COLUMNS if column not in present[table]]


def create_or_migrate(conn: Connection, shared: bool) -> None:
    """Make the ledger's tables that are missing, and give those made before a column or an index was added the column
    (and the indexes of the records) and the index; `shared` (PostgreSQL, where replicas may start at once) adds them only if absent."""
    metadata.create_all(conn)
    exists = " IF NOT EXISTS" if shared else ""
    missing = missing_columns(conn)
    for table, column, kind in missing:
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN{exists} {column} {kind}"))
    if missing:
        for index in records_table.indexes:
            index.create(conn, checkfirst=True)
    add_indexes(conn)


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
        "stored_bytes": record.stored_bytes,
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
        stored_bytes=row.stored_bytes,
    )


def delivery_row(delivery: Delivery) -> dict[str, Any]:
    """The outbox row of a delivery, its fields by name (written out: `_asdict` is the interpreted namedtuple's)."""
    return {
        "task_id": delivery.task_id, "config_id": delivery.config_id, "agent": delivery.agent,
        "delivered": delivery.delivered, "attempts": delivery.attempts, "due_at": delivery.due_at,
        "failing_since": delivery.failing_since, "dead": delivery.dead, "last_error": delivery.last_error,
        "holder": delivery.holder, "held_until": delivery.held_until, "holds": delivery.holds,
    }


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


def task_row(task: Task, owner: str, texts: TaskTexts | None = None) -> dict[str, Any]:
    """The row of the SDK's task table for a task, column for column as the SDK's `DatabaseTaskStore._to_orm` maps it
    (tests/store/test_group_commit.py holds the two equal), written with the faster `proto_json.to_dict`; with `texts`
    the artifacts and history columns are their JSON text, each item's written as it comes or reused (`item_texts`): a
    large task is never held as dicts and as text at once; and the status is the text its logged event was written
    with, where the save logs it."""
    known = None
    if texts is None:
        artifacts: Any = [to_dict(artifact) for artifact in task.artifacts]
        history: Any = [to_dict(message) for message in task.history]
    else:
        artifacts, history = texts.artifacts.array(task.artifacts[:]), texts.history.array(task.history[:])
        known = texts.status.known(task.status)
    return {
        "id": task.id,
        "context_id": task.context_id,
        "kind": "task",
        "owner": owner,
        "last_updated": task.status.timestamp.ToDatetime() if task.status.HasField("timestamp") else None,
        "status": to_dict(task.status) if known is None else JsonText(known),
        "artifacts": artifacts,
        "history": history,
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
