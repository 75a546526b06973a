"""A batch of the ledger's writes (one group commit): what each write is, what the batch writes once its records are
written, and on SQLite the whole batch in one call on the connection's own thread.

On SQLite each statement SQLAlchemy executes through aiosqlite is several trips to that thread (cursor, execute,
fetch, close), each one woken on the event loop again, and an execution context built anew: most of a trivial
turn's cost on the default store. `SqliteBatch` compiles the batch's statements once (the same SQLAlchemy statements
the PostgreSQL path executes), binds each value with the column type's own bind processor (stored exactly as
SQLAlchemy stores it) and runs the batch's statements and their commit (or rollback) in one trip, where
SQLAlchemy's `engine.begin()` took a second trip for its commit."""

import contextlib
import operator
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain
from typing import Any, NamedTuple

from mypy_extensions import mypyc_attr
from sqlalchemy import JSON, LargeBinary, String, Table, and_, insert, select
from sqlalchemy.dialects.sqlite import DATETIME
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.expression import Executable

from a2a_bridge.store.column_json import JsonText, column_json
from a2a_bridge.store.delivery_batch import Change, sqlite_params
from a2a_bridge.store.ledger import Fenced, SentMessage, TaskExists
from a2a_bridge.store.ledger_tables import (
    added_delivery_statement,
    claim_events_table,
    deliveries_table,
    events_table,
    messages_table,
    record_statement,
    records_table,
    upsert_statement,
)

LARGE_BINDING = 1024 * 1024
"""Bytes bound to one statement (a large task's row) past which its SQLite connection is closed once back in the pool:
the sqlite3 module caches its statements with the values last bound to them, so each cached write of a large task
kept a copy of its row (54 MB after 60 follow-ups of 1 MB) until the statement ran again."""
LARGE = "a2a_bridge.large_binding"
"""The pool entry's mark of a connection that bound LARGE_BINDING bytes or more."""


class Save(NamedTuple):
    """A task row (absent for a record-only write), its record row, the claim events it posted, the event-log rows
    it appends and the push configs added with it; `new` writes the record only if none is stored."""

    table: Table | None
    task: dict[str, Any] | None
    record: dict[str, Any]
    events: list[dict[str, Any]]
    new: bool = False
    log: tuple[dict[str, Any], ...] = ()
    deliveries: tuple[dict[str, Any], ...] = ()
    """The outbox rows of push configs added with the save, each written unless its task and config have one."""
    configs: tuple[tuple[Table, dict[str, Any]], ...] = ()
    """Those configs' rows in their push config tables (written over any of the same task and id)."""


class Remember(NamedTuple):
    """A message sent under (agent, owner, messageId), unless it was sent before."""

    key: tuple[str, str, str]
    sent: SentMessage


Write = Save | Remember | Change
Outcome = SentMessage | TaskExists | Fenced | bool | None
"""What a write answers: a message's first send, the refusal of a save, or whether an outbox row change changed its row
(`delivery_batch`); a refusal is the answer of one write, not a failure of the batch that holds it."""
Known = dict[tuple[str, str, str], SentMessage]


def fresh_messages(remembered: list[tuple[int, Remember]], known: Known, results: list[Outcome]) -> list[dict[str, Any]]:
    """The rows of the messages not sent before; the others' writes get what their first send stored (`known`)."""
    fresh: list[dict[str, Any]] = []
    for index, write in remembered:
        if write.key in known:
            results[index] = known[write.key]
            continue
        known[write.key] = write.sent
        agent, owner, message_id = write.key
        sent = write.sent
        fresh.append({
            "agent": agent, "owner": owner, "message_id": message_id, "fingerprint": sent.fingerprint,
            "task_id": sent.task_id, "reply": sent.reply, "session": sent.session,
        })
    return fresh


def record_rows(saves: Iterable[Save], new: bool) -> list[dict[str, Any]]:
    """The record rows to write, new ones or the others: each task's last."""
    return list({save.record["task_id"]: save.record for save in saves if save.new == new}.values())


@dataclass
class Followers:
    """What the saves whose records were written write after them: task rows (by table, each task's last), claim
    events, event-log rows, and the outbox rows and config rows (by table) of the push configs added."""

    tasks: dict[Table, dict[str, dict[str, Any]]]
    events: list[dict[str, Any]]
    logged: list[dict[str, Any]]
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    configs: dict[Table, list[dict[str, Any]]] = field(default_factory=dict)


def followers(saves: list[tuple[int, Save]], written: set[tuple[str, bool]], results: list[Outcome]) -> Followers:
    """The rows that follow the records written; each save whose record was not gets its refusal in `results`."""
    after = Followers({}, [], [])
    for index, save in saves:
        task_id = save.record["task_id"]
        if (task_id, save.new) not in written:
            results[index] = TaskExists(task_id) if save.new else Fenced(task_id)
            continue
        if save.table is not None and save.task is not None:
            after.tasks.setdefault(save.table, {})[task_id] = save.task
        after.events += save.events
        after.logged += save.log
        after.deliveries += save.deliveries
        for table, row in save.configs:
            after.configs.setdefault(table, []).append(row)
    return after


def bound_values(parameters: Any) -> Iterator[Any]:
    """The values a statement bound: one row's, or many rows' (an executemany; SQLAlchemy's "insertmanyvalues" hands
    its one statement of many rows over flat, yet flagged as an executemany)."""
    for item in parameters.values() if isinstance(parameters, dict) else parameters:
        if isinstance(item, tuple | list):
            yield from item
        elif isinstance(item, dict):
            yield from item.values()
        else:
            yield item


def bound_bytes(parameters: Any) -> int:
    return sum(len(value) for value in bound_values(parameters) if isinstance(value, str | bytes))


EVENT_COLUMNS = ["task_id", "claim_generation", "operation", "state", "evidence", "at", "session_generation", "lease_until"]
"""A claim event's columns as `ClaimEvent.row` gives them (the id is the table's own)."""


DATETIME_SECOND = "%04d-%02d-%02d %02d:%02d:%02d."
"""SQLite DATETIME's storage format (its wall-clock fields, no offset) up to its microseconds."""


class DatetimeText:
    """SQLite DATETIME's bind processor with its datetimes written from their fields, the text of the last second
    written kept (a column's values of one batch mostly share it): the same text as its storage format in about a
    third of the time of `isoformat`'s, sliced; anything else by the processor."""

    def __init__(self, process: Callable[[Any], Any]) -> None:
        self._process = process
        none = (0, 0, 0, 0, 0, 0)
        self._last: tuple[tuple[int, int, int, int, int, int], str] = (none, DATETIME_SECOND % none)
        """The last second written and its text, one value (read and replaced whole: no thread sees half of it)."""

    def __call__(self, value: Any) -> Any:
        if value.__class__ is not datetime:
            return self._process(value)
        second = (value.year, value.month, value.day, value.hour, value.minute, value.second)
        last = self._last
        if second != last[0]:
            last = (second, DATETIME_SECOND % second)
            self._last = last
        return last[1] + str(value.microsecond).zfill(6)


def datetime_text(impl: Any, process: Callable[[Any], Any] | None) -> Callable[[Any], Any] | None:
    """`DatetimeText` for SQLite DATETIME in its own storage format; every other type's processor (None where it has
    none) as it is."""
    if process is None or not isinstance(impl, DATETIME) or impl._storage_format != DATETIME._storage_format:
        return process
    return DatetimeText(process)


def json_text(impl: Any, process: Callable[[Any], Any] | None, dialect: Dialect) -> Callable[[Any], Any] | None:
    """A JSON column's bind processor with a value already written as its text (`JsonText`: a task's items and
    status) bound as that text, which is what the processor makes of it through `column_json` with no string
    processor after it; anything else, and every other processor, as before."""
    if process is None or not isinstance(impl, JSON) or dialect._json_serializer is not column_json:  # type: ignore[attr-defined]
        return process
    if impl._str_impl.bind_processor(dialect) is not None:
        return process

    def bind(value: Any) -> Any:
        if value.__class__ is JsonText:
            return value.text
        return process(value)

    return bind


def processed(types: dict[str, Any], names: list[str], dialect: Dialect) -> list[tuple[int, Callable[[Any], Any]]]:
    """(position, bind processor) of each named column that has one on `dialect`, its datetimes (`datetime_text`) and
    JSON texts (`json_text`) bound the faster way."""
    impls = [types[name].dialect_impl(dialect) for name in names]
    processors = [json_text(impl, datetime_text(impl, impl.bind_processor(dialect)), dialect) for impl in impls]
    return [(index, process) for index, process in enumerate(processors) if process is not None]


class Compiled:
    """One statement compiled once for a dialect, and the rows it binds as SQLAlchemy binds them (each value through
    its column type's bind processor, in the statement's order of parameters)."""

    def __init__(self, statement: Executable, table: Table, dialect: Dialect, keys: list[str] | None = None) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=keys)
        self.sql = str(compiled)
        order = list(compiled.positiontup or [])
        types = {column.key: column.type for column in table.columns}
        self._values = operator.itemgetter(*order) if len(order) > 1 else lambda row: (row[order[0]],)
        self._processed = processed(types, order, dialect)
        sized = [index for index, name in enumerate(order) if isinstance(types[name], String | LargeBinary | JSON)]
        self._sized = sized
        self._pick_sized: Callable[[list[Any]], tuple[Any, ...]] | None = None
        """The sized columns' values of a bound row, as a tuple (None: the statement binds none)."""
        if len(sized) > 1:
            self._pick_sized = operator.itemgetter(*sized)
        elif sized:
            self._pick_sized = lambda values: (values[sized[0]],)

    def bind(self, row: dict[str, Any]) -> list[Any]:
        values = list(self._values(row))
        for index, process in self._processed:
            values[index] = process(values[index])
        return values

    def bytes_bound(self, bound: list[list[Any]]) -> int:
        """The bytes of the text and binary values these rows bound in text, binary and JSON columns, the columns whose
        values can be large (`bound_bytes` counts every text value, datetimes' too): counted without a Python loop
        where every such value is text, binary or None (as bound, JSON is text), else one value at a time."""
        if self._pick_sized is None:
            return 0
        try:
            return sum(map(len, filter(None, chain.from_iterable(map(self._pick_sized, bound)))))
        except TypeError:
            pass
        total = 0
        for values in bound:
            for index in self._sized:
                value = values[index]
                if isinstance(value, (str, bytes)):
                    total += len(value)
        return total


@mypyc_attr(allow_interpreted_subclasses=True)
class SqliteBatch:
    """The ledger's batch on SQLite in one trip to the connection's thread (see the module's docstring): aiosqlite
    offers no public call that runs a function there, so this uses its `_execute` and `_conn` (aiosqlite 0.22; the
    tests of the ledger on SQLite fail loudly should they change)."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        messages = messages_table
        key = and_(messages.c.agent == "", messages.c.owner == "", messages.c.message_id == "")
        columns = [messages.c.fingerprint, messages.c.task_id, messages.c.reply, messages.c.session]
        self._known = str(select(*columns).where(key).compile(dialect=dialect))
        """A message's row by its key (agent, owner, messageId: three text parameters in that order)."""
        self._message = Compiled(insert(messages), messages, dialect)
        self._records = {
            new: Compiled(record_statement(dialect.name, new), records_table, dialect) for new in (True, False)
        }
        self._events = Compiled(insert(claim_events_table), claim_events_table, dialect, EVENT_COLUMNS)
        self._logged = Compiled(upsert_statement(dialect.name, events_table), events_table, dialect)
        self._deliveries = Compiled(added_delivery_statement(dialect.name), deliveries_table, dialect)
        self._tasks: dict[Table, Compiled] = {}
        """The upsert of each task table and push config table met so far."""

    async def run(
        self, conn: AsyncConnection, saves: list[tuple[int, Save]], remembered: list[tuple[int, Remember]],
        results: list[Outcome], changes: list[tuple[int, Change]],
    ) -> set[tuple[str, bool]]:
        """Write the batch in one transaction on `conn`, which holds none when called, and commit it (rolled back if
        any statement or the commit fails); `results` gets each remembered message's first send, each refused
        save's refusal and whether each outbox row change changed its row. Returns the (task id, new) of the records
        written."""
        for _, save in saves:
            if save.table is not None and save.table not in self._tasks:
                self._tasks[save.table] = Compiled(upsert_statement(self._dialect.name, save.table), save.table, self._dialect)
            for table, _ in save.configs:
                if table not in self._tasks:
                    self._tasks[table] = Compiled(upsert_statement(self._dialect.name, table), table, self._dialect)
        raw = await conn.get_raw_connection()
        driver = raw.driver_connection
        large: list[bool] = []
        written: set[tuple[str, bool]] = await driver._execute(  # type: ignore[union-attr]
            self._write, driver, saves, remembered, results, large, changes
        )
        if large:
            raw.info[LARGE] = True
        return written

    def _write(
        self, driver: Any, saves: list[tuple[int, Save]], remembered: list[tuple[int, Remember]],
        results: list[Outcome], large: list[bool], changes: list[tuple[int, Change]],
    ) -> set[tuple[str, bool]]:
        """On the connection's thread: the batch's statements and the commit, a failure rolled back and raised as
        SQLAlchemy raises it. The sqlite3 module begins the transaction before the first write, as it does under
        SQLAlchemy's `engine.begin()`."""
        db: sqlite3.Connection = driver._conn
        statement = ""
        try:
            if remembered:
                statement = self._known
                known: Known = {}
                for key in {write.key for _, write in remembered}:
                    row = db.execute(statement, key).fetchone()
                    if row is not None:
                        known[key] = SentMessage(*row)
                statement = self._message.sql
                self._many(db, self._message, fresh_messages(remembered, known, results), large)
            written: set[tuple[str, bool]] = set()
            for new in (True, False):
                records = self._records[new]
                statement = records.sql
                for row in record_rows((save for _, save in saves), new):
                    if db.execute(statement, records.bind(row)).fetchall():
                        written.add((row["task_id"], new))
            after = followers(saves, written, results)
            for table, rows in after.tasks.items():
                statement = self._tasks[table].sql
                self._many(db, self._tasks[table], list(rows.values()), large)
            statement = self._events.sql
            self._many(db, self._events, after.events, large)
            statement = self._logged.sql
            self._many(db, self._logged, after.logged, large)
            statement = self._deliveries.sql
            self._many(db, self._deliveries, after.deliveries, large)
            for table, configs in after.configs.items():
                statement = self._tasks[table].sql
                self._many(db, self._tasks[table], configs, large)
            for index, change in changes:
                statement, params = sqlite_params(change)
                results[index] = db.execute(statement, params).rowcount == 1
            statement = "COMMIT"
            db.commit()
        except BaseException as error:
            with contextlib.suppress(sqlite3.Error):
                db.rollback()
            if isinstance(error, sqlite3.Error):
                raise DBAPIError.instance(statement, None, error, sqlite3.Error) from error
            raise
        return written

    @staticmethod
    def _many(db: sqlite3.Connection, compiled: Compiled, rows: list[dict[str, Any]], large: list[bool]) -> None:
        """Bind and insert the rows (none: nothing), noting a large binding."""
        if not rows:
            return
        bound = [compiled.bind(row) for row in rows]
        if compiled.bytes_bound(bound) >= LARGE_BINDING:
            large.append(True)
        db.executemany(compiled.sql, bound)
