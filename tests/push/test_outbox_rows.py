"""What the outbox writes: the push config row of a task's save, what the SDK's store writes for the same config
(`_to_orm`), its JSON compact, read back by the SDK's store as the same config; the outbox row of a delivery, every
field; delivery ids, stable; each event
logged as its StreamResponse's JSON; and a message
with a push config on SQLite, written with its task and delivered from what this process wrote."""

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import orjson
from a2a.types import (
    Artifact,
    AuthenticationInfo,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct

from a2a_bridge.agents.catalog import sample_agents
from a2a_bridge.app import Bridge
from a2a_bridge.capture.replay import WebhookReceiver
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.core.config import SecurityConfig, parse_network

from a2a_bridge.push.logged_events import END, MESSAGE, UPDATE, event_kind, logged_body
from a2a_bridge.push.config_rows import TEXT_FIELDS, config_json, config_row
from a2a_bridge.push.attempts import IDS, delivery_id
from a2a_bridge.store.proto_json import to_dict
from a2a_bridge.store.ledger_tables import deliveries_table, delivery_row
from a2a_bridge.store.push_rows import Delivery
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.support import A2A, eventually

RUN = "Run the unit tests for payments-api at commit 4b2d9a7"


CONFIGS = [
    TaskPushNotificationConfig(
        task_id="task-1", id="hook-1", url="https://hooks.example.com/h?x=1", token="t0k",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="s3cret"),
    ),
    TaskPushNotificationConfig(task_id="task-1", id="hook-1", url="http://127.0.0.1:9/h", token="t0k"),
    TaskPushNotificationConfig(task_id="task-1", id="hook-1", url="http://127.0.0.1:9/h", tenant="acme"),
]


@pytest.mark.parametrize("config", CONFIGS, ids=["authentication", "token", "tenant"])
def test_the_config_row_is_the_sdk_stores_row(tmp_path: Path, config: TaskPushNotificationConfig) -> None:
    async def check() -> None:
        stores = Stores(StoreConfig.parse(f"sqlite:///{tmp_path / 'rows.db'}"))
        _, push_store = stores.for_agent("agent")
        try:
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



@pytest.mark.parametrize("config", CONFIGS, ids=["authentication", "token", "tenant"])
def test_a_configs_json_is_its_proto_json(config: TaskPushNotificationConfig) -> None:
    assert config_json(config) == orjson.dumps(to_dict(config))


def test_every_field_of_a_push_config_but_its_authentication_is_a_text_field() -> None:
    fields = TaskPushNotificationConfig.DESCRIPTOR.fields
    assert [(field.name, field.json_name) for field in fields if field.name != "authentication"] == list(TEXT_FIELDS)
    texts = [field for field in fields if field.name != "authentication"]
    assert all(field.type == field.TYPE_STRING and not field.is_repeated for field in texts)


def test_the_outbox_row_holds_every_field_of_its_delivery() -> None:
    delivery = Delivery(
        "t-1", "c-1", "agent", 3, attempts=2, due_at=datetime(2026, 1, 2, tzinfo=UTC),
        failing_since=datetime(2026, 1, 1, tzinfo=UTC), dead=True, last_error="500", holder=7,
        held_until=datetime(2026, 1, 3, tzinfo=UTC), holds=4,
    )
    assert delivery_row(delivery) == delivery._asdict()
    assert list(delivery_row(delivery)) == [column.key for column in deliveries_table.columns]


def test_delivery_ids_are_the_name_based_uuids_receivers_have_seen() -> None:
    """Ids stay what they were (uuid5 of the namespace and "task\\nconfig\\nrevision"): a receiver deduplicating by
    them across an upgrade sees the same id for the same delivery."""
    for task_id, config_id, revision in [("t", "c", 1), ("é" * 40, "x" * 255, 123_456_789), ("", "", 0)]:
        expected = str(uuid.uuid5(IDS, f"{task_id}\n{config_id}\n{revision}"))
        assert delivery_id(task_id, config_id, revision) == expected


def test_each_event_is_logged_as_its_stream_responses_json_and_known_by_its_kind() -> None:
    """The log's body of an event is what the SDK's `to_stream_response` makes of it, as JSON (so a webhook carries
    the same bytes either way), and what the body is to a delivery is read from it: a message is not sent, a terminal
    status ends the task's deliveries, an artifact update is neither (whatever its text says)."""
    metadata = Struct()
    metadata.update({"state": "TASK_STATE_COMPLETED", "n": 1.5})
    message = Message(message_id="m", role=Role.ROLE_USER, parts=[Part(text="hi")], metadata=metadata)
    artifact = TaskArtifactUpdateEvent(
        task_id="t", context_id="c", artifact=Artifact(artifact_id="a", parts=[Part(text='{"statusUpdate": 1}')])
    )
    working = TaskStatusUpdateEvent(task_id="t", context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
    done = TaskStatusUpdateEvent(task_id="t", context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED))
    task = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
    for event, kind in ((message, MESSAGE), (artifact, UPDATE), (working, UPDATE), (done, END), (task, UPDATE)):
        body = logged_body(event)
        assert json.loads(body) == MessageToDict(to_stream_response(event))
        assert event_kind(body) == kind, body
    assert event_kind(json.dumps({"artifactUpdate": {"taskId": "t"}}, indent=1)) == UPDATE


def test_a_message_with_a_push_config_costs_no_outbox_transaction_nor_read_of_its_own(tmp_path: Path) -> None:
    """On SQLite a SendMessage's push config is written with its task (no `add_delivery`, no SDK `set_info`), and its
    deliveries start from the rows and events this process wrote (no read of the event log, and no hold in the store:
    one process writes the file, and this one wrote the row), every event arriving in order with the config readable
    afterwards."""

    async def check() -> None:
        bridge = bridge_on(tmp_path / "bridge.db")
        calls: list[str] = []
        ledger, host = bridge.ledger, bridge.agents["test-runner"].host
        assert host.push is not None and host.push_store is not None
        counted_calls = ((ledger, "add_delivery"), (ledger, "events_after"), (ledger, "hold_delivery"), (host.push_store, "set_info"))
        for owner, name in counted_calls:
            counted(owner, name, calls)
        app = bridge.app()
        with WebhookReceiver() as receiver:
            async with bridge.lifespan(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://bridge.test", headers=A2A, timeout=30
            ) as client:
                answer = await rpc(client, "SendStreamingMessage", pushed(receiver))
                frames = [json.loads(line[5:])["result"] for line in answer.text.splitlines() if line.startswith("data:")]
                # the stream may end before its last save commits, whose events drain awaits
                await eventually(lambda: any(b"TASK_STATE_COMPLETED" in d.body for d in receiver.received()), "the task's end")
                await host.push.drain()
                listed = await rpc(client, "ListTaskPushNotificationConfigs", {"taskId": frames[0]["task"]["id"]})
                configs = listed.json()["result"]["configs"]
            sent = [json.loads(delivery.body) for delivery in receiver.received()]
        assert [c["id"] for c in configs] == ["hook-1"]
        assert sent == [frame for frame in frames if "task" not in frame]
        assert sent[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        revisions = [int(d.headers.get("a2a-task-revision") or 0) for d in receiver.received()]
        assert revisions == sorted(revisions) and len(set(revisions)) == len(revisions)
        assert calls == [], calls

    asyncio.run(check())


def bridge_on(database: Path) -> Bridge:
    """The sample agents on a SQLite file, webhooks to 127.0.0.1 allowed."""
    stores = Stores(StoreConfig.parse(f"sqlite:///{database}"))
    security = SecurityConfig(webhook_networks=(parse_network("127.0.0.1/32", "test"),))
    return Bridge(sample_agents(pace=0.01), stores, SystemClock(), lambda: str(uuid.uuid4()), security=security)


def pushed(receiver: WebhookReceiver) -> dict[str, Any]:
    """SendMessage's params: a new message asking to run the tests, with one push config to the receiver's /hook."""
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": RUN}]}
    config = {"url": f"{receiver.base}/hook", "id": "hook-1"}
    return {"message": message, "configuration": {"taskPushNotificationConfig": config}}


async def rpc(client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> httpx.Response:
    return await client.post("/test-runner/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


def counted(owner: object, name: str, calls: list[str]) -> None:
    """Record each call of the object's method in `calls`, then make it."""
    method = getattr(owner, name)

    async def call(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return await method(*args, **kwargs)

    setattr(owner, name, call)
