"""A batch of the push outbox's row changes (holds, settles, drops) in one transaction: the outbox's deliveries of one
round each hold, settle and drop their own row, and those submitted while a transaction runs share the next
(`group_commit.GroupCommit`), so a busy outbox commits once per round, not three times per task. On SQLite the batch is
one trip to the connection's thread, as `ledger_batch.SqliteBatch` does for the task saves; elsewhere SQLAlchemy's
statements in one transaction."""

import contextlib
import sqlite3
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import and_, delete, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
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


def statement(change: Change) -> Executable:
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


def run_sqlite(driver: Any, changes: list[Change]) -> list[bool]:
    """On the SQLite connection's thread (aiosqlite's `_execute`, as `SqliteBatch` uses it): the changes and their
    commit, a failure rolled back and raised as SQLAlchemy raises it."""
    db: sqlite3.Connection = driver._conn
    sql = ""
    try:
        changed: list[bool] = []
        for change in changes:
            sql, params = sqlite_params(change)
            changed.append(db.execute(sql, params).rowcount == 1)
        sql = "COMMIT"
        db.commit()
    except BaseException as error:
        with contextlib.suppress(sqlite3.Error):
            db.rollback()
        if isinstance(error, sqlite3.Error):
            raise DBAPIError.instance(sql, None, error, sqlite3.Error) from error
        raise
    return changed


async def run_batch(conn: AsyncConnection, changes: list[Change], sqlite: bool) -> list[bool]:
    """The changes in one transaction on `conn` (which holds none when called), committed; whether each changed its
    row."""
    if sqlite:
        driver = (await conn.get_raw_connection()).driver_connection
        changed: list[bool] = await driver._execute(run_sqlite, driver, changes)  # type: ignore[union-attr]
        return changed
    async with conn.begin():
        return [(await conn.execute(statement(change))).rowcount == 1 for change in changes]
