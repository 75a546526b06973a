"""What survives a crash: each test kills its own bridge with SIGKILL and starts it again on the same SQLite file."""

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import A2A, DIFF, LOOPBACK_WEBHOOKS, ServerProcess, free_port, rpc

ASK_BASE = "Which base branch should I compare this diff against?"


@pytest.fixture
def bridge(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(f"sqlite:///{tmp_path}/b.db", extra=LOOPBACK_WEBHOOKS).start()
    yield process
    process.stop()


def restart(process: ServerProcess) -> None:
    """A crash (nothing flushed, nothing drained) and a fresh process on the same store and port."""
    process.kill()
    process.start()


def review_request(message_id: str) -> dict:
    return {
        "message": {
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": [
                {"text": "Review this diff of payments-api"},
                {"raw": base64.b64encode(DIFF.encode()).decode(), "mediaType": "text/x-diff"},
            ],
        }
    }


def ask_for_base(process: ServerProcess) -> dict:
    """A code-reviewer task left waiting for the base branch."""
    task = rpc(process.agent("code-reviewer"), "SendMessage", review_request("restart-review-1"))["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert task["status"]["message"]["parts"][0]["text"] == ASK_BASE
    return task


def answer(process: ServerProcess, task: dict, with_context_id: bool) -> dict:
    message = {"messageId": "restart-review-2", "role": "ROLE_USER", "parts": [{"text": "main"}], "taskId": task["id"]}
    if with_context_id:
        message["contextId"] = task["contextId"]
    reply = rpc(process.agent("code-reviewer"), "SendMessage", {"message": message})
    assert "error" not in reply, reply["error"]
    return reply["result"]["task"]


def assert_reviewed(done: dict, task: dict) -> None:
    assert done["id"] == task["id"]
    assert done["contextId"] == task["contextId"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["status"]["message"]["parts"][0]["text"] == "2 findings"
    review = next(a for a in done["artifacts"] if a["artifactId"] == "review")
    assert review["parts"][1]["data"]["base"] == "main"
    assert [m["messageId"] for m in done["history"] if m["role"] == "ROLE_USER"] == ["restart-review-1", "restart-review-2"]


def test_input_required_task_is_answered_after_a_restart(bridge: ServerProcess) -> None:
    task = ask_for_base(bridge)
    restart(bridge)
    assert_reviewed(answer(bridge, task, with_context_id=True), task)


def test_follow_up_without_context_id_after_a_restart_keeps_the_context(bridge: ServerProcess) -> None:
    """SDK defect 2: the stock server answers -32602 here and fails the task (tests/http/test_stock_sdk_defects.py)."""
    task = ask_for_base(bridge)
    restart(bridge)
    done = answer(bridge, task, with_context_id=False)
    assert_reviewed(done, task)
    stored = rpc(bridge.agent("code-reviewer"), "GetTask", {"id": task["id"]})["result"]
    assert stored == done


def test_tasks_history_artifacts_and_push_configs_survive_a_restart(bridge: ServerProcess) -> None:
    runner = bridge.agent("test-runner")
    message = {"messageId": "restart-run-1", "role": "ROLE_USER",
               "parts": [{"text": "Run the unit tests for payments-api at commit 9f3c2e1"}]}
    task = rpc(runner, "SendMessage", {"message": message})["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    config = {"taskId": task["id"], "id": "ci-hook", "url": f"http://127.0.0.1:{free_port()}/hook", "token": "hook-secret-1"}
    created = rpc(runner, "CreateTaskPushNotificationConfig", config)["result"]
    before = rpc(runner, "GetTask", {"id": task["id"]})["result"]
    assert before == task
    assert [a["artifactId"] for a in before["artifacts"]] == ["test-log", "summary"]
    assert len(before["artifacts"][0]["parts"]) == 5
    assert [m["role"] for m in before["history"]] == ["ROLE_USER", "ROLE_AGENT"]

    restart(bridge)

    assert rpc(runner, "GetTask", {"id": task["id"]})["result"] == before
    configs = rpc(runner, "ListTaskPushNotificationConfigs", {"taskId": task["id"]})["result"]["configs"]
    assert configs == [created]
    assert created["url"] == config["url"] and created["token"] == "hook-secret-1"
    listed = rpc(runner, "ListTasks", {})["result"]["tasks"]
    assert [t["id"] for t in listed] == [task["id"]]


def test_tasks_canceled_just_after_they_start_are_stored_canceled(bridge: ServerProcess) -> None:
    """A cancel that lands while the agent's turn is writing to the store neither stalls SQLite nor loses the state."""
    url = bridge.agent("test-runner") + "/a2a/jsonrpc"
    task_ids = []
    with httpx.Client(headers=A2A, timeout=5) as client:
        for index in range(30):
            message = {"messageId": f"restart-cancel-{index}", "role": "ROLE_USER",
                       "parts": [{"text": "Run the full suite for payments-api at commit 9f3c2e1"}]}
            params = {"message": message, "configuration": {"returnImmediately": True}}
            started = client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}).json()
            cancel = {"jsonrpc": "2.0", "id": 2, "method": "CancelTask", "params": {"id": started["result"]["task"]["id"]}}
            canceled = client.post(url, json=cancel).json()
            assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED", canceled
            task_ids.append(canceled["result"]["id"])

    restart(bridge)

    listed = rpc(bridge.agent("test-runner"), "ListTasks", {"pageSize": 100})["result"]["tasks"]
    assert sorted(t["id"] for t in listed) == sorted(task_ids)
    assert {t["status"]["state"] for t in listed} == {"TASK_STATE_CANCELED"}
