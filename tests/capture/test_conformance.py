"""The TCK's system under test, `a2a-bridge serve --agent conformance`, over the wire: each messageId prefix that the
TCK's scenarios name, on blocking sends, non-blocking sends, streams and subscriptions."""

import base64
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from a2a_bridge.agents.conformance import BEHAVIOURS, behaviour_for
from tests.support import A2A, ServerProcess, rpc, rpc_stream, wait_for

TIMEOUT = 0.5
"""TCK_STREAMING_TIMEOUT given to the server: the delayed behaviours wait one or two of it."""
TEXT_PLAIN = {"mediaType": "text/plain"}
FILE_PART = {"raw": base64.b64encode(b"tck").decode(), "filename": "output.txt", **TEXT_PLAIN}


@pytest.fixture(scope="module")
def sut() -> Iterator[str]:
    """A bridge serving only the conformance agent; yields the agent's base URL (what `--sut-host` names)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TCK_STREAMING_TIMEOUT", str(TIMEOUT))
        process = ServerProcess("memory", extra=["--agent", "conformance"]).start()
    yield process.agent("conformance")
    process.stop()


def tck_message(prefix: str, text: str = "TCK", **extra: str) -> dict[str, Any]:
    """A user message whose messageId starts with `prefix`, as the TCK builds them (prefix, then a session suffix)."""
    return {"messageId": f"{prefix}-{uuid.uuid4().hex[:8]}", "role": "ROLE_USER", "parts": [{"text": text}], **extra}


def send(sut: str, prefix: str, configuration: dict[str, Any] | None = None, **extra: str) -> dict[str, Any]:
    params: dict[str, Any] = {"message": tck_message(prefix, **extra)}
    if configuration:
        params["configuration"] = configuration
    reply = rpc(sut, "SendMessage", params)
    assert "result" in reply, reply
    return reply["result"]


def status_text(task: dict[str, Any]) -> str | None:
    message = task["status"].get("message")
    return " ".join(p["text"] for p in message["parts"]) if message else None


def get_task(sut: str, task_id: str) -> dict[str, Any]:
    return rpc(sut, "GetTask", {"id": task_id})["result"]


def kinds(frames: list[dict[str, Any]]) -> list[str]:
    """Each SSE frame's payload, with its state for status updates: ['task', 'statusUpdate:TASK_STATE_WORKING', ...]."""
    names = []
    for frame in frames:
        (kind, body), = frame["result"].items()
        names.append(f"{kind}:{body['status']['state']}" if kind == "statusUpdate" else kind)
    return names


def test_the_card_is_served_and_only_the_named_agent_is() -> None:
    process = ServerProcess("memory", extra=["--agent", "conformance", "--agent", "test-runner"]).start()
    try:
        index = httpx.get(process.url + "/", timeout=10).json()
        assert [agent["name"] for agent in index["agents"]] == ["conformance", "test-runner"]
        card = httpx.get(process.agent("conformance") + "/.well-known/agent-card.json", timeout=10).json()
    finally:
        process.stop()
    assert card["name"] == "conformance"
    assert card["capabilities"] == {"streaming": True, "pushNotifications": True}
    assert [skill["id"] for skill in card["skills"]] == ["tck"]
    assert {(i["protocolBinding"], i["url"]) for i in card["supportedInterfaces"]} == {
        ("JSONRPC", process.agent("conformance") + "/a2a/jsonrpc"),
        ("HTTP+JSON", process.agent("conformance") + "/a2a/rest"),
    }


def test_the_longest_prefix_wins() -> None:
    assert behaviour_for("tck-artifact-file-url-1a2b3c4d") == "tck-artifact-file-url"
    assert behaviour_for("tck-artifact-file-1a2b3c4d") == "tck-artifact-file"
    assert behaviour_for("tck-stream-artifact-file-1a2b") == "tck-stream-artifact-file"
    assert behaviour_for("tck-send-003-1a2b") is None


def test_complete_task(sut: str) -> None:
    task = send(sut, "tck-complete-task")["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(task) == "Hello from TCK"
    assert task["id"] and task["contextId"]


def test_complete_task_keeps_a_client_context_id(sut: str) -> None:
    context_id = f"tck-client-context-{uuid.uuid4().hex[:8]}"
    task = send(sut, "tck-complete-task", contextId=context_id)["task"]
    assert task["contextId"] == context_id


def test_delayed_complete_blocks_until_completed(sut: str) -> None:
    started = time.monotonic()
    task = send(sut, "tck-delayed-complete", {"returnImmediately": False})["task"]
    assert time.monotonic() - started >= TIMEOUT
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(task) == "Done after delay"


def test_delayed_complete_returns_immediately_while_working(sut: str) -> None:
    task = send(sut, "tck-delayed-complete", {"returnImmediately": True})["task"]
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    done = wait_for(
        lambda: (t := get_task(sut, task["id"]))["status"]["state"] == "TASK_STATE_COMPLETED" and t,
        timeout=10 * TIMEOUT, what="the delayed task to complete",
    )
    assert status_text(done) == "Done after delay"


@pytest.mark.parametrize(
    ("prefix", "part"),
    [
        ("tck-artifact-text", {"text": "Generated text content"}),
        ("tck-artifact-file", FILE_PART),
        ("tck-artifact-file-url", {"url": "https://example.com/output.txt", "filename": "output.txt", **TEXT_PLAIN}),
        ("tck-artifact-data", {"data": {"key": "value", "count": 42}, "mediaType": "application/json"}),
    ],
)
def test_artifact_behaviours_complete_with_one_artifact(sut: str, prefix: str, part: dict[str, Any]) -> None:
    task = send(sut, prefix)["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    [artifact] = task["artifacts"]
    assert artifact["parts"] == [part]
    assert get_task(sut, task["id"])["artifacts"] == task["artifacts"]


def test_message_response_is_a_message_and_no_task(sut: str) -> None:
    result = send(sut, "tck-message-response")
    assert set(result) == {"message"}
    message = result["message"]
    assert message["role"] == "ROLE_AGENT"
    assert message["parts"] == [{"text": "Direct message response"}]
    assert message["contextId"]


def test_input_required_waits_and_a_follow_up_completes_it(sut: str) -> None:
    task = send(sut, "tck-input-required")["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    again = send(sut, "tck-input-required", taskId=task["id"])["task"]
    assert (again["id"], again["status"]["state"]) == (task["id"], "TASK_STATE_INPUT_REQUIRED")
    done = send(sut, "tck-complete-task", taskId=task["id"])["task"]
    assert (done["id"], done["contextId"]) == (task["id"], task["contextId"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    user_turns = [m["messageId"].rsplit("-", 1)[0] for m in done["history"] if m["role"] == "ROLE_USER"]
    assert user_turns == ["tck-input-required", "tck-input-required", "tck-complete-task"]


def test_an_input_required_task_can_be_canceled_and_then_not_again(sut: str) -> None:
    task = send(sut, "tck-input-required")["task"]
    canceled = rpc(sut, "CancelTask", {"id": task["id"]})["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert rpc(sut, "CancelTask", {"id": task["id"]})["error"]["code"] == -32002


def test_a_delayed_task_canceled_while_it_waits_ends_canceled(sut: str) -> None:
    task = send(sut, "tck-delayed-complete", {"returnImmediately": True})["task"]
    canceled = rpc(sut, "CancelTask", {"id": task["id"]})["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    time.sleep(2 * TIMEOUT)
    assert get_task(sut, task["id"])["status"]["state"] == "TASK_STATE_CANCELED"


def test_auth_required_is_a_task_that_waits(sut: str) -> None:
    task = send(sut, "tck-auth-required")["task"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert get_task(sut, task["id"])["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"


def test_reject_task_ends_rejected(sut: str) -> None:
    task = send(sut, "tck-reject-task")["task"]
    assert task["status"]["state"] == "TASK_STATE_REJECTED"
    assert status_text(task) == "rejected"
    followup = rpc(sut, "SendMessage", {"message": tck_message("tck-complete-task", taskId=task["id"])})
    assert followup["error"]["code"] == -32004


@pytest.mark.parametrize(
    ("prefix", "part"),
    [
        ("tck-stream-001", {"text": "Stream hello from TCK"}),
        ("tck-stream-003", {"text": "Stream task lifecycle"}),
        ("tck-stream-ordering-001", {"text": "Ordered output"}),
        ("tck-stream-artifact-text", {"text": "Streamed text content"}),
        ("tck-stream-artifact-file", FILE_PART),
    ],
)
def test_streaming_behaviours_send_working_one_artifact_and_completed(
    sut: str, prefix: str, part: dict[str, Any]
) -> None:
    frames = rpc_stream(sut, "SendStreamingMessage", {"message": tck_message(prefix)})
    assert kinds(frames) == [
        "task", "statusUpdate:TASK_STATE_WORKING", "artifactUpdate", "statusUpdate:TASK_STATE_COMPLETED"
    ]
    update = frames[2]["result"]["artifactUpdate"]
    assert update["artifact"]["parts"] == [part]
    assert update["lastChunk"] is True


def test_stream_002_completes_at_once(sut: str) -> None:
    frames = rpc_stream(sut, "SendStreamingMessage", {"message": tck_message("tck-stream-002")})
    assert kinds(frames) == ["task", "statusUpdate:TASK_STATE_COMPLETED"]


def test_chunked_artifact_arrives_in_two_appended_chunks(sut: str) -> None:
    frames = rpc_stream(sut, "SendStreamingMessage", {"message": tck_message("tck-stream-artifact-chunked")})
    assert kinds(frames) == [
        "task", "statusUpdate:TASK_STATE_WORKING", "artifactUpdate", "artifactUpdate",
        "statusUpdate:TASK_STATE_COMPLETED",
    ]
    first, last = (frame["result"]["artifactUpdate"] for frame in frames[2:4])
    assert first["artifact"]["artifactId"] == last["artifact"]["artifactId"]
    assert (first["artifact"]["parts"], first.get("append", False), first.get("lastChunk", False)) == (
        [{"text": "chunk-1 "}], False, False
    )
    assert (last["artifact"]["parts"], last["append"], last["lastChunk"]) == ([{"text": "chunk-2"}], True, True)
    [artifact] = get_task(sut, first["taskId"])["artifacts"]
    assert artifact["parts"] == [{"text": "chunk-1 "}, {"text": "chunk-2"}]


def test_resubscribe_message_stays_working_for_two_timeouts_and_a_subscriber_sees_it_end(sut: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": tck_message("test-resubscribe-message-id")}}
    started = time.monotonic()
    with httpx.stream("POST", f"{sut}/a2a/jsonrpc", json=body, headers=A2A, timeout=30) as response:
        lines = response.iter_lines()
        first = json.loads(next(line for line in lines if line.startswith("data:")).removeprefix("data:"))
        task_id = first["result"]["task"]["id"]
        subscribed = rpc_stream(sut, "SubscribeToTask", {"id": task_id})
        rest = [json.loads(line.removeprefix("data:")) for line in lines if line.startswith("data:")]
    elapsed = time.monotonic() - started
    assert elapsed >= 2 * TIMEOUT
    assert kinds(subscribed)[0] == "task"
    assert subscribed[0]["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert kinds(subscribed)[-1] == "statusUpdate:TASK_STATE_COMPLETED"
    assert kinds([first, *rest]) == ["task", "statusUpdate:TASK_STATE_WORKING", "statusUpdate:TASK_STATE_COMPLETED"]
    assert rpc(sut, "SubscribeToTask", {"id": task_id})["error"]["code"] == -32004


def test_an_unknown_prefix_completes_and_says_so(sut: str) -> None:
    task = send(sut, "tck-something-else")["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert (status_text(task) or "").startswith("Unhandled messageId prefix: tck-something-else-")


def test_an_unsupported_media_type_is_refused(sut: str) -> None:
    message = tck_message("tck-send-003")
    message["parts"] = [{"raw": "dGNr", "mediaType": "application/x-unsupported-tck-type"}]
    assert rpc(sut, "SendMessage", {"message": message})["error"]["code"] == -32005


def test_every_behaviour_is_tested_here() -> None:
    tested = {
        "tck-complete-task", "tck-delayed-complete", "tck-artifact-text", "tck-artifact-file", "tck-artifact-file-url",
        "tck-artifact-data", "tck-message-response", "tck-input-required", "tck-auth-required", "tck-reject-task",
        "tck-stream-001", "tck-stream-002", "tck-stream-003", "tck-stream-ordering-001", "tck-stream-artifact-text",
        "tck-stream-artifact-file", "tck-stream-artifact-chunked", "test-resubscribe-message-id",
    }
    assert set(BEHAVIOURS) == tested


def test_the_conformance_agent_runs_a_reused_message_id_again(sut: str) -> None:
    """The TCK reuses messageIds by design: on the conformance agent each send starts its own task."""
    message_id = f"tck-complete-task-{uuid.uuid4().hex[:8]}"
    first = rpc(sut, "SendMessage", {"message": tck_message("tck-complete-task", "one") | {"messageId": message_id}})["result"]["task"]
    second = rpc(sut, "SendMessage", {"message": tck_message("tck-complete-task", "two") | {"messageId": message_id}})["result"]["task"]
    assert first["id"] != second["id"]
    assert second["status"]["state"] == "TASK_STATE_COMPLETED"
