"""The ledger's batch (one group commit) on PostgreSQL, written on the asyncpg connection itself.

Through SQLAlchemy each statement of a batch is an execution context built anew, its parameters processed row by row
and its result set up, on the far side of the greenlet bridge to asyncpg, and a batch was BEGIN, about eight
statements and COMMIT, each a round trip: most of a PostgreSQL SendMessage's server CPU. `PgBatch` writes the common
batch (saves and messages; no outbox change, no push config added, each task saved once) as one statement
(`pg_save_statement.SaveStatement`: one round trip, its own transaction), and any other in one transaction of the same
SQLAlchemy statements compiled once (each value bound through its column type's bind processor: stored exactly as
SQLAlchemy stores it), which asyncpg prepares once per connection (its statement cache), each statement's rows sent
in one trip (`executemany`, `fetchmany`). The SQL is the same either way: records written only where new, or over
the version their writer holds and not ended (a fenced save writes nothing), the rows that follow only for the
records written, NOTIFY in the same transaction. A failure is raised as SQLAlchemy raises it (`IntegrityError`,
`OperationalError`...), and a connection lost on the way is invalidated rather than given back to the pool."""

from typing import Any

from sqlalchemy import Table, insert
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from a2a_bridge.store.delivery_batch import Change, pg_params
from a2a_bridge.store.ledger import Fenced, SentMessage, TaskExists
from a2a_bridge.store.ledger_batch import (
    EVENT_COLUMNS,
    Compiled,
    Known,
    Outcome,
    Remember,
    Save,
    followers,
    fresh_messages,
    record_rows,
)
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
from a2a_bridge.store.pg_session import CHANNEL, MAX_PAYLOAD, event_notices
from a2a_bridge.store.pg_save_statement import MESSAGE_KEY, SaveStatement, values_document

KNOWN_SQL = (
    f"SELECT agent, owner, message_id, fingerprint, task_id, reply, session FROM {messages_table.name} "
    "WHERE (agent, owner, message_id) IN (SELECT * FROM unnest($1::varchar[], $2::varchar[], $3::varchar[]))"
)
"""The rows of the messages sent before, of many keys in one statement."""
NOTIFY_SQL = f"SELECT pg_notify('{CHANNEL}', payload) FROM unnest($1::text[]) AS payload"


def one_statement(saves: list[tuple[int, Save]], changes: list[tuple[int, Change]]) -> bool:
    """Whether a batch can be one statement: no outbox changes, no push configs added, and each task saved once (one
    statement may not write a row twice)."""
    if changes:
        return False
    tasks = {save.record["task_id"] for _, save in saves}
    return len(tasks) == len(saves) and not any(save.deliveries or save.configs for _, save in saves)


def rowcount(status: str) -> int:
    """The rows a statement changed, from asyncpg's status ("UPDATE 1", "DELETE 0")."""
    return int(status.rsplit(" ", 1)[-1])


class PgBatch:
    """The ledger's batch on asyncpg (see the module's docstring)."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._message = Compiled(insert(messages_table), messages_table, dialect)
        self._records = {
            new: Compiled(record_statement(dialect.name, new), records_table, dialect) for new in (True, False)
        }
        self._events = Compiled(insert(claim_events_table), claim_events_table, dialect, EVENT_COLUMNS)
        self._logged = Compiled(upsert_statement(dialect.name, events_table), events_table, dialect)
        self._deliveries = Compiled(added_delivery_statement(dialect.name), deliveries_table, dialect)
        self._tasks: dict[Table, Compiled] = {}
        """The upsert of each task table and push config table met so far."""
        self._one = SaveStatement(dialect)
        self._held: tuple[AsyncConnection, Any] | None = None
        """The connection of the last batch and its pool connection: the writer keeps its connection from batch to
        batch, so its pool connection is looked up once (through SQLAlchemy's greenlet bridge, a greenlet per call)."""

    def _upsert(self, table: Table) -> Compiled:
        compiled = self._tasks.get(table)
        if compiled is None:
            compiled = self._tasks[table] = Compiled(upsert_statement(self._dialect.name, table), table, self._dialect)
        return compiled

    async def run(
        self, conn: AsyncConnection, saves: list[tuple[int, Save]], remembered: list[tuple[int, Remember]],
        results: list[Outcome], changes: list[tuple[int, Change]],
    ) -> set[tuple[str, bool]]:
        """Write the batch in one transaction on `conn` (which holds none when called) and commit it, rolled back if
        any statement or the commit fails; `results` gets each remembered message's first send, each refused save's
        refusal and whether each outbox row change changed its row; the other replicas hear of the records written
        and the events logged at commit (NOTIFY). Returns the (task id, new) of the records written."""
        held = self._held
        if held is None or held[0] is not conn:
            held = self._held = (conn, await conn.get_raw_connection())
        raw = held[1]
        driver: Any = raw.driver_connection
        at = ["BEGIN"]
        """The statement under way, for the error of a failure."""
        if one_statement(saves, changes):
            try:
                return await self._one_statement(driver, saves, remembered, results, at)
            except Exception as error:
                await self._raise(conn, raw, at[0], error)
        try:
            async with driver.transaction():
                written: set[tuple[str, bool]] = set()
                if remembered:
                    await self._remember(driver, remembered, results, at)
                for new in (True, False):
                    rows = record_rows((save for _, save in saves), new)
                    if rows:
                        records = self._records[new]
                        at[0] = records.sql
                        found = await driver.fetchmany(records.sql, [records.bind(row) for row in rows])
                        written |= {(row[0], new) for row in found}
                after = followers(saves, written, results)
                for table, tasks in after.tasks.items():
                    await self._many(driver, self._upsert(table), list(tasks.values()), at)
                await self._many(driver, self._events, after.events, at)
                await self._many(driver, self._logged, after.logged, at)
                await self._many(driver, self._deliveries, after.deliveries, at)
                for table, configs in after.configs.items():
                    await self._many(driver, self._upsert(table), configs, at)
                for index, change in changes:
                    at[0], params = pg_params(change)
                    results[index] = rowcount(await driver.execute(at[0], *params)) == 1
                payloads = [f"t:{task_id}" for task_id in sorted({task_id for task_id, _ in written})]
                payloads += event_notices(after.logged)
                if payloads:
                    at[0] = NOTIFY_SQL
                    await driver.execute(NOTIFY_SQL, payloads)
                at[0] = "COMMIT"
        except Exception as error:
            await self._raise(conn, raw, at[0], error)
        return written

    async def _one_statement(
        self, driver: Any, saves: list[tuple[int, Save]], remembered: list[tuple[int, Remember]],
        results: list[Outcome], at: list[str],
    ) -> set[tuple[str, bool]]:
        """The batch as one statement (`pg_save_statement.SaveStatement`): one round trip, its own transaction."""
        one = self._one
        tasks: dict[Table, list[dict[str, Any]]] = {}
        records: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
        events: list[dict[str, Any]] = []
        logged: list[dict[str, Any]] = []
        for _, save in saves:
            records[save.new].append(save.record)
            if save.table is not None and save.task is not None:
                tasks.setdefault(save.table, []).append(save.task)
            events += save.events
            logged += save.log
        tables = tuple(tasks)
        args: list[Any] = []
        candidates: list[dict[str, Any]] = []
        if remembered:
            candidates = fresh_messages(remembered, {}, [None] * len(results))
            args.append(values_document([[row[name] for name in MESSAGE_KEY] for row in candidates]))
            args.append(one.messages.document(candidates))
        args += [one.records[True].document(records[True]), one.records[False].document(records[False])]
        for table in tables:
            args.append(one.tasks(table).document(tasks[table]))
        args += [one.events.document(events), one.logged.document(logged)]
        notices = [(row["task_id"], f"e:{row['task_id']}:{row['seq']}:{row['body']}") for row in logged]
        short = [(task_id, notice) for task_id, notice in notices if len(notice.encode()) <= MAX_PAYLOAD]
        args.append(values_document([[task_id, notice, seq] for seq, (task_id, notice) in enumerate(short)]))
        at[0] = one.sql(tables, bool(remembered))
        rows = await driver.fetch(at[0], *args)
        written = {row[1] for row in rows if row[0] == "w"}
        for index, save in saves:
            task_id = save.record["task_id"]
            if task_id not in written:
                results[index] = TaskExists(task_id) if save.new else Fenced(task_id)
        if remembered:
            known: Known = {(r[1], r[2], r[3]): SentMessage(r[4], r[5], r[6], r[7]) for r in rows if r[0] == "k"}
            inserted = {(r[1], r[2], r[3]) for r in rows if r[0] == "i"}
            lost = [write for _, write in remembered if write.key not in known and write.key not in inserted]
            if lost:
                at[0] = KNOWN_SQL
                known.update(await self._known(driver, list({write.key for write in lost})))
            fresh_messages(remembered, known, results)
        return {(save.record["task_id"], save.new) for _, save in saves if save.record["task_id"] in written}

    async def _known(self, driver: Any, keys: list[tuple[str, str, str]]) -> Known:
        """The stored rows of these messages (read on their own: each inserted by another writer meanwhile)."""
        rows = await driver.fetch(KNOWN_SQL, *(list(column) for column in zip(*keys, strict=True)))
        return {(r[0], r[1], r[2]): SentMessage(r[3], r[4], r[5], r[6]) for r in rows}

    async def _remember(
        self, driver: Any, remembered: list[tuple[int, Remember]], results: list[Outcome], at: list[str]
    ) -> None:
        """Insert the messages not sent before; the others get what their first send stored."""
        at[0] = KNOWN_SQL
        known = await self._known(driver, list({write.key for _, write in remembered}))
        await self._many(driver, self._message, fresh_messages(remembered, known, results), at)

    @staticmethod
    async def _many(driver: Any, compiled: Compiled, rows: list[dict[str, Any]], at: list[str]) -> None:
        """Bind and write the rows in one trip (none: nothing)."""
        if rows:
            at[0] = compiled.sql
            await driver.executemany(compiled.sql, [compiled.bind(row) for row in rows])

    async def _raise(self, conn: AsyncConnection, raw: Any, sql: str, error: Exception) -> None:
        """Raise the driver's error as SQLAlchemy would (its DBAPI error class, wrapped), the connection invalidated
        where the error says it is lost (and the writer's connection closed: the next batch looks its new one up)."""
        self._held = None
        adapted = raw.dbapi_connection
        dbapi = adapted.dbapi
        try:
            adapted._handle_exception(error)
        except dbapi.Error as translated:
            lost = self._dialect.is_disconnect(translated, adapted, None)
            if lost:
                await conn.invalidate(translated)
            raise DBAPIError.instance(
                sql, None, translated, dbapi.Error, connection_invalidated=lost, dialect=self._dialect
            ) from error
        raise error

