"""Where tasks live: parse `--store` and build each agent's SDK task store and push-config store."""

from dataclasses import dataclass

from a2a.server.tasks import (
    DatabasePushNotificationConfigStore,
    DatabaseTaskStore,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    PushNotificationConfigStore,
    TaskStore,
)
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


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
        if config.url is not None:
            kwargs = {"connect_args": {"timeout": 30}} if config.url.startswith("sqlite") else {}
            self.engine = create_async_engine(config.url, **kwargs)

    def for_agent(self, agent: str) -> tuple[TaskStore, PushNotificationConfigStore]:
        suffix = agent.replace("-", "_")
        if self.engine is None:
            return InMemoryTaskStore(), InMemoryPushNotificationConfigStore()
        return (
            DatabaseTaskStore(self.engine, table_name=f"tasks_{suffix}"),
            DatabasePushNotificationConfigStore(self.engine, table_name=f"push_configs_{suffix}"),
        )

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.dispose()


async def owner_of(store: TaskStore, task_id: str) -> str | None:
    """Who owns a stored task, for operator endpoints that act on any caller's task."""
    if isinstance(store, DatabaseTaskStore):
        await store.initialize()
        model = store.task_model
        async with store.async_session_maker() as session:
            result = await session.execute(select(model.owner).where(model.id == task_id))
            return result.scalar_one_or_none()
    if isinstance(store, InMemoryTaskStore):
        for owner, tasks in store._impl.tasks.items():
            if task_id in tasks:
                return owner
    return None
