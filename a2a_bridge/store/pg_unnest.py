"""A whole batch of the ledger's saves and messages as one PostgreSQL statement: each table's rows as one array per
column (`unnest`), the writes as data-modifying CTEs of one statement, which PostgreSQL runs as one transaction in
one round trip. The same SQL as the batch's own statements (`SaveStatement` keeps SQLAlchemy's conflict clause and
RETURNING of each): the records written only where new, or over the version their writer holds and not ended; the
task rows, claim events and event-log rows only of the records written (`written`); the NOTIFY of the records written
and their events at commit; each message inserted only where none is stored, the stored ones read from the
statement's snapshot."""

from collections.abc import Callable
from typing import Any

from sqlalchemy import Table, insert
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.expression import Executable

from a2a_bridge.store.ledger_batch import EVENT_COLUMNS
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


class Arrays:
    """An INSERT of a table's rows from one array per column, as SQLAlchemy's `statement` writes them: the same columns,
    each value through its column type's bind processor, the statement's conflict clause and RETURNING kept."""

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
        self.casts = [types[name].compile(dialect=dialect) for name in self.columns]
        processors = [types[name].dialect_impl(dialect).bind_processor(dialect) for name in self.columns]
        self.processors: list[Callable[[Any], Any] | None] = processors

    def sql(self, first: int, where: str = "", tail: str | None = None) -> str:
        """The INSERT, its arrays the parameters from $`first` on; `where` filters the rows."""
        arrays = ", ".join(f"${first + index}::{cast}[]" for index, cast in enumerate(self.casts))
        end = self.tail if tail is None else tail
        return f"INSERT INTO {self.table} ({self.names}) SELECT * FROM unnest({arrays}) AS s({self.names}){where}{end}"

    def arrays(self, rows: list[dict[str, Any]]) -> list[list[Any]]:
        """The rows' values, one list per column, bound as SQLAlchemy binds them."""
        columns = []
        for name, process in zip(self.columns, self.processors, strict=True):
            values = [row[name] for row in rows]
            columns.append(values if process is None else [process(value) for value in values])
        return columns


class SaveStatement:
    """The one statement of a batch (see the module's docstring), built per set of task tables met (each its own
    prepared statement); its rows are ("w", task id) for each record written, ("k", agent, owner, message id,
    fingerprint, task id, reply, session) for each message stored before, ("i", agent, owner, message id) for each
    message inserted, and one ("n", ...) row that makes PostgreSQL evaluate the notices."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self.records = {new: Arrays(record_statement(dialect.name, new), records_table, dialect) for new in (True, False)}
        self.events = Arrays(insert(claim_events_table), claim_events_table, dialect, EVENT_COLUMNS)
        self.logged = Arrays(upsert_statement(dialect.name, events_table), events_table, dialect)
        self.messages = Arrays(insert(messages_table), messages_table, dialect)
        self._tasks: dict[Table, Arrays] = {}
        self._sql: dict[tuple[tuple[Table, ...], bool], str] = {}

    def tasks(self, table: Table) -> Arrays:
        arrays = self._tasks.get(table)
        if arrays is None:
            arrays = self._tasks[table] = Arrays(upsert_statement(self._dialect.name, table), table, self._dialect)
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

        def part(name: str, arrays: Arrays, where: str = "", tail: str | None = None) -> None:
            nonlocal first
            parts.append(f"{name} AS ({arrays.sql(first, where, tail)})")
            first += len(arrays.columns)

        if remembered:
            key = ", ".join(MESSAGE_KEY)
            parts.append(
                f"m_keys AS (SELECT * FROM unnest(${first}::varchar[], ${first + 1}::varchar[], ${first + 2}::varchar[])"
                f" AS k({key}))"
            )
            first += 3
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
            f"SELECT n.payload, 1, '', n.seq FROM unnest(${first}::varchar[], ${first + 1}::text[], ${first + 2}::int[])"
            f" AS n(task_id, payload, seq) WHERE n.task_id IN ({WRITTEN})) AS p ORDER BY p.part, p.key, p.seq)"
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
