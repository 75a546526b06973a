"""The push outbox's row changes (holds, settles, drops: `push_rows.Change`), written in the ledger's group commit: the changes submitted
while a transaction runs share the next one with the task saves of the moment (`group_commit.GroupCommit`), so a busy
outbox adds no transaction of its own. Each change as SQLite's statement and parameters (run by
`ledger_batch.SqliteBatch` in its one trip to the connection's thread) and as PostgreSQL's (run by `pg_batch.PgBatch`
on the asyncpg connection)."""

from datetime import datetime
from typing import Any

from a2a_bridge.store.ledger_tables import deliveries_table
from a2a_bridge.store.push_rows import Change, Hold, Settle


TABLE = deliveries_table.name
HOLD_SQL = (
    f"UPDATE {TABLE} SET holder = ?, held_until = ?, holds = ? "
    "WHERE task_id = ? AND config_id = ? AND delivered = ? AND holds = ? AND dead = 0"
)
SETTLE_SQL = (
    f"UPDATE {TABLE} SET delivered = ?, attempts = ?, due_at = ?, failing_since = ?, dead = ?, last_error = ?, "
    "holder = NULL, held_until = NULL, holds = ? WHERE task_id = ? AND config_id = ? AND holder IS ? AND holds = ?"
)
DROP_SQL = f"DELETE FROM {TABLE} WHERE task_id = ? AND config_id = ? AND holds = ?"


def sqlite_time(value: datetime | None) -> str | None:
    """A time as SQLAlchemy's SQLite DATETIME stores it: the wall-clock fields to the microsecond (all times are UTC)."""
    return None if value is None else value.isoformat(" ", "microseconds")[:26]


def sqlite_params(change: Change) -> tuple[str, tuple[Any, ...]]:
    """The SQLite statement of one change and its parameters."""
    if isinstance(change, Hold):
        d = change.delivery
        return HOLD_SQL, (change.session, sqlite_time(change.until), d.holds + 1, d.task_id, d.config_id, d.delivered, d.holds)
    if isinstance(change, Settle):
        held, s = change.held, change.settled
        return SETTLE_SQL, (
            s.delivered, s.attempts, sqlite_time(s.due_at), sqlite_time(s.failing_since), int(s.dead), s.last_error,
            held.holds, held.task_id, held.config_id, held.holder, held.holds,
        )
    d = change.delivery
    return DROP_SQL, (d.task_id, d.config_id, d.holds)


PG_HOLD_SQL = (
    f"UPDATE {TABLE} SET holder = $1, held_until = $2, holds = $3 "
    "WHERE task_id = $4 AND config_id = $5 AND delivered = $6 AND holds = $7 AND dead IS false AND (task_id, config_id) "
    f"IN (SELECT task_id, config_id FROM {TABLE} WHERE task_id = $4 AND config_id = $5 FOR UPDATE SKIP LOCKED)"
)
"""A hold on PostgreSQL takes no row another transaction has locked (a replica stopped inside its batch, SIGSTOP or a
frozen VM, keeps its locks): it is refused at once, where waiting would stall this replica's whole group commit."""
PG_SETTLE_SQL = (
    f"UPDATE {TABLE} SET delivered = $1, attempts = $2, due_at = $3, failing_since = $4, dead = $5, last_error = $6, "
    "holder = NULL, held_until = NULL, holds = $7 "
    "WHERE task_id = $8 AND config_id = $9 AND holder IS NOT DISTINCT FROM $10::INTEGER AND holds = $11"
)
PG_DROP_SQL = f"DELETE FROM {TABLE} WHERE task_id = $1 AND config_id = $2 AND holds = $3"


def pg_params(change: Change) -> tuple[str, tuple[Any, ...]]:
    """The PostgreSQL statement of one change and its parameters (asyncpg's: times as datetimes)."""
    if isinstance(change, Hold):
        d = change.delivery
        return PG_HOLD_SQL, (change.session, change.until, d.holds + 1, d.task_id, d.config_id, d.delivered, d.holds)
    if isinstance(change, Settle):
        held, s = change.held, change.settled
        return PG_SETTLE_SQL, (
            s.delivered, s.attempts, s.due_at, s.failing_since, s.dead, s.last_error,
            held.holds, held.task_id, held.config_id, held.holder, held.holds,
        )
    d = change.delivery
    return PG_DROP_SQL, (d.task_id, d.config_id, d.holds)
