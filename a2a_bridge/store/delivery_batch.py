"""The push outbox's row changes (holds, settles, drops), written in the ledger's group commit: the changes submitted
while a transaction runs share the next one with the task saves of the moment (`group_commit.GroupCommit`), so a busy
outbox adds no transaction of its own. Each change as SQLite's statement and parameters (run by
`ledger_batch.SqliteBatch` in its one trip to the connection's thread) and as SQLAlchemy's (PostgreSQL)."""

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import and_, delete, update
from sqlalchemy.sql.expression import Executable

from a2a_bridge.store.ledger import Delivery
from a2a_bridge.store.ledger_tables import deliveries_table, delivery_key, delivery_row


class Hold(NamedTuple):
    """Hold a delivery for `session` until `until`, only if it is still as read (delivered as far, held as often)."""

    delivery: Delivery
    session: int
    until: datetime


class Settle(NamedTuple):
    """Store what became of a held delivery and release the hold, only if no other replica took it over."""

    held: Delivery
    settled: Delivery


class Drop(NamedTuple):
    """Remove a delivery that is done with, only if it is held as often as when read."""

    delivery: Delivery


Change = Hold | Settle | Drop
"""One row change of a batch; each answers whether it changed its row."""

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


def change_statement(change: Change) -> Executable:
    """The SQLAlchemy statement of one change (PostgreSQL)."""
    d = deliveries_table
    if isinstance(change, Hold):
        delivery = change.delivery
        return (
            update(d)
            .where(and_(*delivery_key(delivery), d.c.delivered == delivery.delivered, d.c.holds == delivery.holds,
                        d.c.dead.is_(False)))
            .values(holder=change.session, held_until=change.until, holds=delivery.holds + 1)
        )
    if isinstance(change, Settle):
        held = change.held
        values = {**delivery_row(change.settled), "holder": None, "held_until": None, "holds": held.holds}
        return update(d).where(and_(*delivery_key(held), d.c.holder == held.holder, d.c.holds == held.holds)).values(**values)
    return delete(d).where(and_(*delivery_key(change.delivery), d.c.holds == change.delivery.holds))
