"""Where tasks live: parse `--store` and build each agent's SDK task store and push-config store."""

import functools
import warnings
from dataclasses import dataclass
from typing import Any

from a2a.server.models import (
    PushNotificationConfigModel,
    TaskModel,
    create_push_notification_config_model,
    create_task_model,
)
from a2a.server.tasks import (
    DatabasePushNotificationConfigStore,
    DatabaseTaskStore,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    PushNotificationConfigStore,
    TaskStore,
)
from sqlalchemy import event
from sqlalchemy.exc import SAWarning
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from a2a_bridge.ledger import Ledger, MemoryLedger
from a2a_bridge.sql_ledger import SqlLedger


@functools.cache
def table_models(suffix: str) -> tuple[type[TaskModel], type[PushNotificationConfigModel]]:
    """An agent's two table models, built once per process: SQLAlchemy refuses to declare a table twice, which the
    SDK's stores do for a custom table name each time one is constructed (a second Bridge in a process failed)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        return create_task_model(f"tasks_{suffix}"), create_push_notification_config_model(f"push_configs_{suffix}")


def write_ahead_log(connection: Any, _record: Any) -> None:
    """SQLite in WAL mode with NORMAL sync: a commit survives a killed process without waiting for the disk each time."""
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


@dataclass(frozen=True)
class StoreConfig:
    """A parsed `--store` value: `memory`, `sqlite:///PATH` or `postgresql://…`."""

    url: str | None

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


class Stores:
    """The engine shared by every agent, and one table pair per agent."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.engine: AsyncEngine | None = None
        self._tables: list[DatabaseTaskStore | DatabasePushNotificationConfigStore] = []
        if config.url is not None:
            kwargs: dict[str, Any] = {"connect_args": {"timeout": 30}, "pool_size": 1, "max_overflow": 0} if config.url.startswith("sqlite") else {}
            self.engine = create_async_engine(config.url, **kwargs)
            if self.engine.dialect.name == "sqlite":
                event.listen(self.engine.sync_engine, "connect", write_ahead_log)

    def for_agent(self, agent: str) -> tuple[TaskStore, PushNotificationConfigStore]:
        suffix = agent.replace("-", "_")
        if self.engine is None:
            return InMemoryTaskStore(), InMemoryPushNotificationConfigStore()
        task_model, config_model = table_models(suffix)
        task_store = DatabaseTaskStore(self.engine)
        task_store.task_model = task_model
        push_store = DatabasePushNotificationConfigStore(self.engine)
        push_store.config_model = config_model
        self._tables += [task_store, push_store]
        return task_store, push_store

    async def initialize(self) -> None:
        """Create every agent's tables before the first request: the SDK's stores create them on first use, and two
        first uses at once (a turn saving its task while a ListTasks runs) both tried to create the same table."""
        for store in self._tables:
            await store.initialize()

    def ledger(self) -> Ledger:
        """The bridge's own tables, in the same database as the tasks."""
        return MemoryLedger() if self.engine is None else SqlLedger(self.engine)

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.dispose()

