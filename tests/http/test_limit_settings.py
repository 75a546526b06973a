"""The limits of issue 14 and how they are set: one message's size (`max_message_bytes`), push configs per task
(`max_push_configs`), the read and shutdown timeouts, and `--limit NAME=N` beside the file and the environment. Past a
limit the caller gets -32602 (HTTP+JSON 400) whose text names the limit, and nothing is stored."""

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from a2a_bridge.cli.main import parser, security
from a2a_bridge.core.config import Limits, load
from tests.security_support import ALICE, message, write_config
from tests.claim_support import DEPLOYER
from tests.support import A2A, ServerProcess, rpc, user_message

LIMITS = "\n[limits]\nmax_message_bytes = 2048\nmax_push_configs = 2\n"
HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("limit-settings")
    config = write_config(directory, LIMITS)
    process = ServerProcess("memory", pace=0.05, extra=["--config", str(config), "--require-auth"]).start()
    yield process
    process.stop()


def violation(error: dict[str, Any]) -> tuple[str, str]:
    details = error.get("data") or error.get("details") or []
    [found] = [v for d in details if d.get("@type", "").endswith("BadRequest") for v in d["fieldViolations"]]
    return found["field"], found["description"]


def task_ids(server: ServerProcess) -> list[str]:
    listed = rpc(server.agent("test-runner"), "ListTasks", {}, headers=ALICE)["result"]
    return sorted(task["id"] for task in listed.get("tasks", []))


def test_a_message_past_max_message_bytes_is_refused_naming_the_limit(limited: ServerProcess) -> None:
    runner = limited.agent("test-runner")
    before = task_ids(limited)
    big = {**message("Run the unit tests"), "parts": [{"text": "Run the unit tests"}, {"data": {"pad": "z" * 3000}}]}
    reply = rpc(runner, "SendMessage", {"message": big}, headers=ALICE)
    assert reply["error"]["code"] == -32602
    field, text = violation(reply["error"])
    assert field == "message" and "max_message_bytes" in text and "2048" in text
    rest = httpx.post(f"{runner}/a2a/rest/message:send", json={"message": big}, headers={**A2A, **ALICE}, timeout=10)
    assert rest.status_code == 400 and "max_message_bytes" in violation(rest.json()["error"])[1]
    assert task_ids(limited) == before
    small = {**big, "messageId": message("x")["messageId"], "parts": [{"text": "Run the unit tests"}, {"data": {"pad": "z" * 1000}}]}
    assert "result" in rpc(runner, "SendMessage", {"message": small}, headers=ALICE)


def test_push_configs_past_max_push_configs_are_refused_naming_the_limit(limited: ServerProcess) -> None:
    runner = limited.agent("test-runner")
    task_id = rpc(runner, "SendMessage", {"message": message("Run the unit tests")}, headers=ALICE)["result"]["task"]["id"]
    for number in range(2):
        config = {"taskId": task_id, "id": f"hook-{number}", "url": HOOK}
        assert "result" in rpc(runner, "CreateTaskPushNotificationConfig", config, headers=ALICE)
    third = rpc(runner, "CreateTaskPushNotificationConfig", {"taskId": task_id, "id": "hook-2", "url": HOOK}, headers=ALICE)
    field, text = violation(third["error"])
    assert third["error"]["code"] == -32602 and field == "taskId" and "max_push_configs" in text
    rest = httpx.post(
        f"{runner}/a2a/rest/tasks/{task_id}/pushNotificationConfigs", json={"url": HOOK}, headers={**A2A, **ALICE}, timeout=10
    )
    assert rest.status_code == 400 and "max_push_configs" in violation(rest.json()["error"])[1]
    replaced = rpc(runner, "CreateTaskPushNotificationConfig", {"taskId": task_id, "id": "hook-1", "url": HOOK + "2"}, headers=ALICE)
    assert replaced["result"]["url"] == HOOK + "2", "a config the task has may still be replaced"
    follow_up = {
        "message": message("commit 9f3c2e1", taskId=task_id),
        "configuration": {"taskPushNotificationConfig": {"id": "hook-3", "url": HOOK}},
    }
    refused = rpc(runner, "SendMessage", follow_up, headers=ALICE)
    assert "max_push_configs" in violation(refused["error"])[1]
    listed = rpc(runner, "ListTaskPushNotificationConfigs", {"taskId": task_id}, headers=ALICE)["result"]["configs"]
    assert sorted(c["id"] for c in listed) == ["hook-0", "hook-1"]
    assert rpc(runner, "GetTask", {"id": task_id}, headers=ALICE)["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


def serve_limits(*argv: str) -> Limits:
    return security(parser().parse_args(["serve", *argv])).limits


def test_limits_are_set_by_file_environment_and_command_line_in_that_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Limits() == Limits(
        max_message_bytes=1_048_576, max_task_bytes=16_777_216, max_push_configs=16,
        header_timeout=10, body_timeout=30, shutdown_timeout=10,
    )
    config = tmp_path / "c.toml"
    config.write_text("[limits]\nmax_push_configs = 3\nheader_timeout = 4\nmax_task_bytes = 1000\n")
    assert load(config, {}).limits.max_task_bytes == 1000
    monkeypatch.delenv("A2A_BRIDGE_CONFIG", raising=False)
    monkeypatch.setenv("A2A_BRIDGE_HEADER_TIMEOUT", "5")
    limits = serve_limits("--config", str(config), "--limit", "shutdown_timeout=3", "--limit", "max_push_configs=7")
    assert (limits.max_push_configs, limits.header_timeout, limits.shutdown_timeout) == (7, 5, 3)


@pytest.mark.parametrize(
    ("value", "named"),
    [("max_things=3", "--limit: unknown limit 'max_things'"), ("shutdown_timeout=0", "shutdown_timeout must be a positive"),
     ("header_timeout=soon", "header_timeout must be a positive")],
)
def test_a_bad_limit_on_the_command_line_stops_serve_naming_it(value: str, named: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "a2a_bridge", "serve", "--store", "memory", "--limit", value],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2 and named in proc.stderr, proc.stderr


def test_a_follow_up_past_max_task_bytes_is_refused_and_the_task_goes_on(tmp_path: Path) -> None:
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", pace=0.05, extra=["--limit", "max_task_bytes=60000"]).start()
    try:
        deployer = server.agent("deployer")
        parked = rpc(deployer, "SendMessage", {"message": user_message("Deploy something", "size-0")}, headers=DEPLOYER)
        task_id = parked["result"]["task"]["id"]
        replies = [
            rpc(deployer, "SendMessage", {"message": user_message("z" * 20_000, f"size-{n}", taskId=task_id)}, headers=DEPLOYER)
            for n in range(1, 5)
        ]
        assert ["result" in reply for reply in replies] == [True, True, False, False]
        field, text = violation(replies[2]["error"])
        assert field == "message" and "max_task_bytes" in text and "60000" in text
        task = rpc(deployer, "GetTask", {"id": task_id}, headers=DEPLOYER)["result"]
        assert [m["messageId"] for m in task["history"] if m["role"] == "ROLE_USER"] == ["size-0", "size-1", "size-2"]
        canceled = rpc(deployer, "CancelTask", {"id": task_id}, headers=DEPLOYER)["result"]
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    finally:
        server.stop()
