"""Where tasks live: parse `--store` and build each agent's SDK task store and push-config store."""

import asyncio
import functools
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiosqlite
from a2a.compat.v0_3.model_conversions import compat_task_model_to_core
from a2a.server.models import (
    PushNotificationConfigModel,
    TaskModel,
    create_push_notification_config_model,
    create_task_model,
)
from a2a.server.tasks import (
    DatabasePushNotificationConfigStore,
    InMemoryPushNotificationConfigStore,
    PushNotificationConfigStore,
    TaskStore,
)
from a2a.types import Task
from pathlib import Path

from sqlalchemy import event, make_url, text
from sqlalchemy.exc import SAWarning
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, PoolResetState

from a2a_bridge.store import sqlite_adapters
from a2a_bridge.store.column_json import column_json
from a2a_bridge.store.ledger import Ledger, MemoryLedger
from a2a_bridge.store.ledger_batch import LARGE, LARGE_BINDING, bound_bytes
from a2a_bridge.store.memory_task_store import MemoryTaskStore
from a2a_bridge.store.proto_json import from_dict
from a2a_bridge.store.sql_ledger import SqlLedger
from a2a_bridge.store.sql_task_store import SqlTaskStore
from a2a_bridge.store.store_faults import StoreHealth


@functools.cache
def table_models(suffix: str) -> tuple[type[TaskModel], type[PushNotificationConfigModel]]:
    """An agent's two table models, built once per process: SQLAlchemy refuses to declare a table twice, which the
    SDK's stores do for a custom table name each time one is constructed (a second Bridge in a process failed)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        return create_task_model(f"tasks_{suffix}"), create_push_notification_config_model(f"push_configs_{suffix}")


def task_from_row(row: TaskModel) -> Task:
    """A stored task as the SDK's `DatabaseTaskStore._from_orm` reads it, parsed with the faster `proto_json.from_dict`
    (`ParseDict` searched every string for unpaired surrogates: two thirds of the event loop's time when follow-ups
    reloaded a task of 20 MB); rows of older protocol versions through the SDK's own conversion."""
    if row.protocol_version != "1.0":
        return compat_task_model_to_core(row)
    task = Task(id=row.id, context_id=row.context_id)
    if row.status:
        from_dict(row.status, task.status)
    for artifact in row.artifacts or []:
        from_dict(artifact, task.artifacts.add())
    for message in row.history or []:
        from_dict(message, task.history.add())
    if row.task_metadata:
        task.metadata.update(row.task_metadata)
    return task


def write_ahead_log(connection: Any, _record: Any) -> None:
    """SQLite in WAL mode with NORMAL sync: a commit survives a killed process without waiting for the disk each time."""
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def read_only(connection: Any, _record: Any) -> None:
    """A connection of the SQLite read pool: it may only read (WAL lets it read while the writer writes)."""
    cursor = connection.cursor()
    cursor.execute("PRAGMA query_only=ON")
    cursor.close()


READERS = 4
"""Connections of the SQLite read pool, beside the one writer."""
PG_POOL = {"pool_size": 20, "max_overflow": 0}
"""PostgreSQL connections a process keeps, and the most it opens: all of them kept, for SQLAlchemy closes each
overflow connection as it comes back, and under load (32 requests at once) that forked a PostgreSQL backend every
ten requests or so, doubling the database's CPU per SendMessage (docs/PERFORMANCE.md, PostgreSQL)."""
IDLE_IN_TRANSACTION = 10.0
"""Seconds PostgreSQL lets a transaction of this process sit open with no statement running before it ends the
session: a process paused or cut off inside a transaction (a GC pause, a frozen VM, a partition) holds its row locks
that long at most, so the live replicas' writes waiting on them go on, and its own commit fails when it wakes. The
bridge's transactions wait on nothing but their own statements."""
WORKER_EXIT = 5.0
"""Seconds a SQLite connection that did not open waits for aiosqlite's worker thread to end."""


def pg_settings(config: "StoreConfig") -> dict[str, Any]:
    """asyncpg's arguments for each PostgreSQL connection: the session settings the bridge relies on."""
    idle = str(round(config.idle_in_transaction * 1000))
    return {"server_settings": {"idle_in_transaction_session_timeout": idle}}


def sqlite_connector(url: str, connect_args: dict[str, Any]) -> Callable[[], Awaitable[aiosqlite.Connection]]:
    """Open aiosqlite's connections as SQLAlchemy's dialect does (the URL's arguments, then `connect_args`), and let
    one that fails to open return only once aiosqlite's worker thread has ended: aiosqlite stops the thread without
    waiting, and the thread, reporting to an event loop closed meanwhile (`serve` stopping at once on a store that does
    not open), printed a traceback of "Event loop is closed" beside the one-line error."""
    parsed = make_url(url)
    args, params = parsed.get_dialect()().create_connect_args(parsed)
    params = {**params, **connect_args}

    async def connect() -> aiosqlite.Connection:
        connection = aiosqlite.connect(*args, **params)
        worker = connection._thread  # as SQLAlchemy's dialect, which makes it a daemon too
        worker.daemon = True
        try:
            return await connection
        except Exception:
            await asyncio.to_thread(worker.join, WORKER_EXIT)
            raise

    return connect


def note_large_binding(
    conn: Connection, _cursor: Any, _statement: str, parameters: Any, _context: Any, _executemany: bool
) -> None:
    """Mark the connection of a statement that bound LARGE_BINDING bytes or more (the ledger's batches mark their own:
    `ledger_batch.SqliteBatch`)."""
    if bound_bytes(parameters) >= LARGE_BINDING:
        conn.info[LARGE] = True


def close_after_large_binding(_connection: Any, entry: ConnectionPoolEntry) -> None:
    """Close a connection returned to the pool after it bound a large value; the pool opens a new one when needed."""
    if entry.info.pop(LARGE, False):
        entry.invalidate()


def roll_back_open_transaction(dbapi_connection: Any, entry: ConnectionPoolEntry, state: PoolResetState) -> None:
    """A SQLite connection back in the pool is rolled back only if a transaction is still open on it: after a commit
    (every `engine.begin()` that ends well) SQLAlchemy's own reset rolled back anyway, one more trip to aiosqlite's
    thread per transaction for nothing."""
    if state.terminate_only:
        return
    try:
        idle = not entry.driver_connection.in_transaction  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - a connection that cannot say is rolled back (and dropped if that fails)
        idle = False
    if not idle:
        dbapi_connection.rollback()


@dataclass(frozen=True)
class StoreConfig:
    """A parsed `--store` value: `memory`, `sqlite:///PATH` or `postgresql://…`."""

    url: str | None
    idle_in_transaction: float = IDLE_IN_TRANSACTION

    @classmethod
    def parse(cls, value: str) -> "StoreConfig":
        if value == "memory":
            return cls(None)
        if value.startswith("sqlite:///"):
            return cls("sqlite+aiosqlite:///" + value.removeprefix("sqlite:///"))
        if value.startswith(("postgresql://", "postgres://")):
            return cls("postgresql+asyncpg://" + value.split("://", 1)[1])
        if value.startswith(("sqlite+aiosqlite://", "postgresql+asyncpg://")):
            return cls(value)
        raise ValueError(f"unsupported store {value!r}: use memory, sqlite:///PATH or postgresql://...")

    def sqlite_path(self) -> Path | None:
        """The SQLite file, for a store kept in one (None for memory, PostgreSQL and SQLite in memory)."""
        prefix = "sqlite+aiosqlite:///"
        if self.url is None or not self.url.startswith(prefix) or self.url.endswith(":memory:"):
            return None
        return Path(self.url.removeprefix(prefix).split("?", 1)[0])


class Stores:
    """The engine shared by every agent, and one table pair per agent."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.engine: AsyncEngine | None = None
        self.health = StoreHealth(config.sqlite_path())
        self.reader: AsyncEngine | None = None
        """Where task and ledger reads go: on a SQLite file a pool of read-only connections, so that reads never
        queue behind the one writer; on PostgreSQL the engine's own pool in autocommit, so that a read is its one
        statement without a BEGIN and a ROLLBACK around it (under READ COMMITTED each statement reads its own
        snapshot either way)."""
        self._tables: list[SqlTaskStore | DatabasePushNotificationConfigStore] = []
        if config.url is not None:
            sqlite = config.url.startswith("sqlite")
            kwargs: dict[str, Any] = {
                "async_creator": sqlite_connector(config.url, {"timeout": 30}), "pool_size": 1, "max_overflow": 0,
                "pool_reset_on_return": None, "json_serializer": column_json,
            } if sqlite else {**PG_POOL, "json_serializer": column_json, "connect_args": pg_settings(config)}
            self.engine = self.reader = create_async_engine(config.url, **kwargs)
            if not sqlite:
                self.reader = self.engine.execution_options(isolation_level="AUTOCOMMIT")
            if sqlite:
                sqlite_adapters.install()
                event.listen(self.engine.sync_engine, "reset", roll_back_open_transaction)
                event.listen(self.engine.sync_engine, "connect", write_ahead_log)
                event.listen(self.engine.sync_engine, "after_cursor_execute", note_large_binding)
                event.listen(self.engine.sync_engine, "checkin", close_after_large_binding)
            if config.sqlite_path() is not None:
                readers = {**kwargs, "pool_size": READERS}
                self.reader = create_async_engine(config.url, **readers)
                event.listen(self.reader.sync_engine, "connect", read_only)
                event.listen(self.reader.sync_engine, "reset", roll_back_open_transaction)

    def for_agent(self, agent: str) -> tuple[TaskStore, PushNotificationConfigStore]:
        suffix = agent.replace("-", "_")
        if self.engine is None or self.reader is None:
            return MemoryTaskStore(), InMemoryPushNotificationConfigStore()
        task_model, config_model = table_models(suffix)
        task_store = SqlTaskStore(self.engine, self.reader, task_model, task_from_row)
        push_store = DatabasePushNotificationConfigStore(self.engine)
        push_store.config_model = config_model
        self._tables += [task_store, push_store]
        return task_store, push_store

    async def initialize(self) -> None:
        """Create every agent's tables before the first request: the SDK's stores create them on first use, and two
        first uses at once (a turn saving its task while a ListTasks runs) both tried to create the same table."""
        for store in self._tables:
            await store.initialize()
        self.health.opened()

    def ledger(self, observe_write: Callable[[str, float], None] | None = None) -> Ledger:
        """The bridge's own tables, in the same database as the tasks; `observe_write` times the SQL writes."""
        return MemoryLedger() if self.engine is None else SqlLedger(self.engine, self.health, observe_write, self.reader)

    async def reachable(self) -> str | None:
        """None when the store answers a query and may be written, else why not."""
        problem = self.health.check() or self.health.failing
        if problem is not None or self.engine is None:
            return problem
        try:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception as error:  # noqa: BLE001 - any failure means not ready; its name is the reason
            return f"the store does not answer: {type(error).__name__}"
        return None

    async def close(self) -> None:
        if self.reader is not None and self.engine is not None and self.reader.pool is not self.engine.pool:
            await self.reader.dispose()
        if self.engine is not None:
            await self.engine.dispose()

