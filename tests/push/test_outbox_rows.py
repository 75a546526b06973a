"""The push config row the outbox writes in a task's save: what the SDK's store writes for the same config (`_to_orm`),
its JSON compact, read back by the SDK's store as the same config."""

import asyncio
from pathlib import Path

import orjson
from a2a.types import AuthenticationInfo, TaskPushNotificationConfig

from a2a_bridge.push.outbox import config_row
from a2a_bridge.store.stores import StoreConfig, Stores


def test_the_config_row_is_the_sdk_stores_row(tmp_path: Path) -> None:
    async def check() -> None:
        stores = Stores(StoreConfig.parse(f"sqlite:///{tmp_path / 'rows.db'}"))
        _, push_store = stores.for_agent("agent")
        try:
            config = TaskPushNotificationConfig(
                task_id="task-1", id="hook-1", url="https://hooks.example.com/h?x=1", token="t0k",
                authentication=AuthenticationInfo(scheme="Bearer", credentials="s3cret"),
            )
            row = config_row(push_store, config, "alice")  # type: ignore[arg-type]
            model = push_store._to_orm("task-1", config, "alice")  # type: ignore[attr-defined]
            table = push_store.config_model.__table__  # type: ignore[attr-defined]
            expected = {column.key: getattr(model, column.key) for column in table.columns}
            assert {key: value for key, value in row.items() if key != "config_data"} == {
                key: value for key, value in expected.items() if key != "config_data"
            }
            assert orjson.loads(row["config_data"]) == orjson.loads(expected["config_data"])
            assert push_store._from_orm(push_store.config_model(**row)) == config  # type: ignore[attr-defined]
        finally:
            await stores.close()

    asyncio.run(check())

