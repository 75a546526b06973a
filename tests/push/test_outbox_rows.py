"""What the outbox writes: the push config row of a task's save, what the SDK's store writes for the same config
(`_to_orm`), its JSON compact, read back by the SDK's store as the same config; and delivery ids, stable."""

import asyncio
import uuid
from pathlib import Path

import orjson
from a2a.types import AuthenticationInfo, TaskPushNotificationConfig

from a2a_bridge.push.outbox import IDS, config_row, delivery_id
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



def test_delivery_ids_are_the_name_based_uuids_receivers_have_seen() -> None:
    """Ids stay what they were (uuid5 of the namespace and "task\\nconfig\\nrevision"): a receiver deduplicating by
    them across an upgrade sees the same id for the same delivery."""
    for task_id, config_id, revision in [("t", "c", 1), ("é" * 40, "x" * 255, 123_456_789), ("", "", 0)]:
        expected = str(uuid.uuid5(IDS, f"{task_id}\n{config_id}\n{revision}"))
        assert delivery_id(task_id, config_id, revision) == expected
