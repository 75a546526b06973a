"""The push config table's row of a config added with a save of its task (`Outbox.attach`): the row the SDK's
`DatabasePushNotificationConfigStore` writes for it, so that its store reads it back as the same config."""

import functools
from typing import Any

import orjson
from a2a.server.tasks import DatabasePushNotificationConfigStore
from a2a.types import TaskPushNotificationConfig
from sqlalchemy import Table

from a2a_bridge.store.proto_json import to_dict

PLAIN_CONFIG_COLUMNS = frozenset({"task_id", "config_id", "owner", "config_data", "protocol_version"})
TEXT_FIELDS = (("tenant", "tenant"), ("id", "id"), ("task_id", "taskId"), ("url", "url"), ("token", "token"))
"""A push config's string fields, each with its JSON name, in the order of its message: every field but
`authentication`."""


def config_row(
    store: DatabasePushNotificationConfigStore, config: TaskPushNotificationConfig, owner: str
) -> dict[str, Any]:
    """The push config table's row of a config as the SDK's store writes it (`_to_orm`): its JSON, written by
    proto_json and orjson where the store neither encrypts nor converts and the table has the SDK's columns."""
    table = store.config_model.__table__
    plain = store._fernet is None and store.core_to_model_conversion is None
    if not plain or not sdk_columns(table):
        model = store._to_orm(config.task_id, config, owner)
        return {column.key: getattr(model, column.key) for column in table.columns}
    return {
        "task_id": config.task_id, "config_id": config.id, "owner": owner,
        "config_data": config_json(config), "protocol_version": "1.0",
    }


def config_json(config: TaskPushNotificationConfig) -> bytes:
    """`orjson.dumps(to_dict(config))`, written directly for a config with no `authentication` (its other fields are
    strings, left out when empty)."""
    if config.HasField("authentication"):
        return orjson.dumps(to_dict(config))
    return orjson.dumps({name: value for field, name in TEXT_FIELDS if (value := getattr(config, field))})


@functools.lru_cache(maxsize=16)
def sdk_columns(table: Table) -> bool:
    """Whether a push config table has the SDK's columns, no more and no fewer."""
    return set(table.columns.keys()) == PLAIN_CONFIG_COLUMNS
