"""A whole batch of the ledger's saves and messages as one PostgreSQL statement: each table's rows as one JSON document
of their values (`jsonb_array_elements`), the writes as data-modifying CTEs of one statement, which PostgreSQL runs as one transaction in
one round trip. The same SQL as the batch's own statements (`SaveStatement` keeps SQLAlchemy's conflict clause and
RETURNING of each): the records written only where new, or over the version their writer holds and not ended; the
task rows, claim events and event-log rows only of the records written (`written`); the NOTIFY of the records written
and their events at commit; each message inserted only where none is stored, the stored ones read from the
statement's snapshot."""

import operator
from typing import Any

import orjson
from sqlalchemy import Table, insert
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.expression import Executable

from a2a_bridge.store.ledger_batch import EVENT_COLUMNS, processed
from a2a_bridge.store.ledger_tables import (
    claim_events_table,
    events_table,
    messages_table,
    record_statement,
    records_table,
    upsert_statement,
)
from a2a_bridge.store.pg_session import CHANNEL

MESSAGE_KEY = ["agent", "owner", "message_id"]
WRITTEN = "SELECT task_id FROM written"


class Rows:
    """An INSERT of a table's rows from one JSON document, a list of each row's values in the statement's order of
    columns, as SQLAlchemy's `statement` writes them: the same columns, each value through its column type's bind
    processor (a JSON column's value is its text, a JSON string in the document) and cast to its column's type as the
    statement's parameters are, the statement's conflict clause and RETURNING kept. One text parameter for all the
    rows: asyncpg encodes an array parameter element by element (an `isinstance` of three ABCs for each), which cost
    more than the rows' own values; orjson writes the document in one call."""

    def __init__(self, statement: Executable, table: Table, dialect: Dialect, keys: list[str] | None = None) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=keys)
        sql = str(compiled)
        self.columns: list[str] = list(compiled.positiontup or [])
        cut = sql.find(" ON CONFLICT")
        cut = sql.find(" RETURNING") if cut < 0 else cut
        self.tail = sql[cut:] if cut >= 0 else ""
        quote = dialect.identifier_preparer.quote
        self.table = quote(table.name)
        self.names = ", ".join(quote(name) for name in self.columns)
        types = {column.key: column.type for column in table.columns}
        casts = [types[name].compile(dialect=dialect) for name in self.columns]
        self.values = ", ".join(
            f"(r.v->>{index})::{cast} AS {quote(name)}" for index, (name, cast) in enumerate(zip(self.columns, casts))
        )
        self._pick = operator.itemgetter(*self.columns) if len(self.columns) > 1 else None
        self._processed = processed(types, self.columns, dialect)

    def sql(self, number: int, where: str = "", tail: str | None = None) -> str:
        """The INSERT, its document parameter $`number`; `where` filters the rows (named `s`), which are inserted in
        the document's order (a serial id follows it)."""
        end = self.tail if tail is None else tail
        return (
            f"INSERT INTO {self.table} ({self.names}) SELECT {self.names} FROM (SELECT {self.values}, r.i "
            f"FROM jsonb_array_elements(${number}::jsonb) WITH ORDINALITY AS r(v, i)) AS s{where} ORDER BY s.i{end}"
        )

    def document(self, rows: list[dict[str, Any]]) -> str:
        """The rows' values, bound as SQLAlchemy binds them, as the statement's JSON document."""
        return values_document([self.bound(row) for row in rows])

    def bound(self, row: dict[str, Any]) -> list[Any]:
        values = list(self._pick(row)) if self._pick is not None else [row[self.columns[0]]]
        for index, process in self._processed:
            values[index] = process(values[index])
        return values


def values_document(rows: list[list[Any]]) -> str:
    """Rows of values as one JSON document (orjson: datetimes as ISO 8601 with their offset, which PostgreSQL reads)."""
    return orjson.dumps(rows).decode()


class SaveStatement:
    """The one statement of a batch (see the module's docstring), built per set of task tables met (each its own
    prepared statement); its rows are ("w", task id) for each record written, ("k", agent, owner, message id,
    fingerprint, task id, reply, session) for each message stored before, ("i", agent, owner, message id) for each
    message inserted, and one ("n", ...) row that makes PostgreSQL evaluate the notices."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self.records = {new: Rows(record_statement(dialect.name, new), records_table, dialect) for new in (True, False)}
        self.events = Rows(insert(claim_events_table), claim_events_table, dialect, EVENT_COLUMNS)
        self.logged = Rows(upsert_statement(dialect.name, events_table), events_table, dialect)
        self.messages = Rows(insert(messages_table), messages_table, dialect)
        self._tasks: dict[Table, Rows] = {}
        self._sql: dict[tuple[tuple[Table, ...], bool], str] = {}

    def tasks(self, table: Table) -> Rows:
        arrays = self._tasks.get(table)
        if arrays is None:
            arrays = self._tasks[table] = Rows(upsert_statement(self._dialect.name, table), table, self._dialect)
        return arrays

    def sql(self, tables: tuple[Table, ...], remembered: bool) -> str:
        """The statement for these task tables (in this order), with the messages' part where `remembered`."""
        sql = self._sql.get((tables, remembered))
        if sql is None:
            sql = self._sql[(tables, remembered)] = self._build(tables, remembered)
        return sql

    def _build(self, tables: tuple[Table, ...], remembered: bool) -> str:
        parts: list[str] = []
        first = 1

        def part(name: str, rows: Rows, where: str = "", tail: str | None = None) -> None:
            nonlocal first
            parts.append(f"{name} AS ({rows.sql(first, where, tail)})")
            first += 1

        if remembered:
            key = ", ".join(MESSAGE_KEY)
            parts.append(
                f"m_keys AS (SELECT (r->>0)::varchar AS agent, (r->>1)::varchar AS owner, (r->>2)::varchar AS message_id"
                f" FROM jsonb_array_elements(${first}::jsonb) AS r)"
            )
            first += 1
            parts.append(
                f"m_known AS (SELECT m.agent, m.owner, m.message_id, m.fingerprint, m.task_id, m.reply, m.session "
                f"FROM {messages_table.name} AS m JOIN m_keys USING ({key}))"
            )
            part("m_new", self.messages, tail=f" ON CONFLICT DO NOTHING RETURNING {key}")
        part("r_new", self.records[True])
        part("r_old", self.records[False])
        parts.append("written AS (SELECT task_id FROM r_new UNION ALL SELECT task_id FROM r_old)")
        for number, table in enumerate(tables):
            key = self._dialect.identifier_preparer.quote(next(iter(table.primary_key.columns)).name)
            part(f"t_{number}", self.tasks(table), f" WHERE s.{key} IN ({WRITTEN})")
        part("e", self.events, f" WHERE s.task_id IN ({WRITTEN})")
        part("l", self.logged, f" WHERE s.task_id IN ({WRITTEN})")
        parts.append(
            f"notices AS (SELECT pg_notify('{CHANNEL}', p.payload) FROM ("
            f"SELECT 't:' || task_id AS payload, 0 AS part, task_id AS key, 0 AS seq FROM written UNION ALL "
            f"SELECT n.payload, 1, '', n.seq FROM (SELECT (r->>0)::varchar AS task_id, (r->>1)::text AS payload, "
            f"(r->>2)::int AS seq FROM jsonb_array_elements(${first}::jsonb) AS r) AS n "
            f"WHERE n.task_id IN ({WRITTEN})) AS p ORDER BY p.part, p.key, p.seq)"
        )
        none = "NULL::varchar, NULL::varchar, NULL::varchar, NULL::varchar, NULL::text, NULL::int"
        rows = [
            "SELECT 'w'::text AS kind, task_id::varchar, " + none + " FROM written",
            "SELECT 'n', NULL, " + none.replace("NULL::int", "(SELECT count(*)::int FROM notices)"),
        ]
        if remembered:
            rows += [
                "SELECT 'k', agent, owner, message_id, fingerprint, task_id, reply, session FROM m_known",
                "SELECT 'i', agent, owner, message_id, NULL, NULL, NULL, NULL FROM m_new",
            ]
        return "WITH " + ", ".join(parts) + " " + " UNION ALL ".join(rows)
