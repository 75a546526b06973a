"""Interop with Node's @a2a-js/sdk: its client (interop/js/client.mjs) against a real bridge, and the small echo agent
server (interop/js/echo-server.mjs) the replayer is pointed at."""

import json
import subprocess
from typing import Any

import httpx
import pytest

from tests.js_support import JS_DIR, EchoServer, node
from tests.support import A2A, ServerProcess


@pytest.fixture(scope="module")
def js_client_run(server: ServerProcess) -> dict[str, dict[str, Any]]:
    """Each step of client.mjs run once against the shared bridge, by step name."""
    proc = subprocess.run([node(), "client.mjs", server.url], cwd=JS_DIR, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [step["step"] for step in steps] == ["complete", "stream", "inputRequired", "cancel"], steps
    return {step["step"]: step for step in steps}


def test_the_js_client_completes_a_test_run(js_client_run: dict[str, dict[str, Any]]) -> None:
    complete = js_client_run["complete"]
    assert complete["kind"] == "task"
    assert (complete["state"], complete["status"]) == ("TASK_STATE_COMPLETED", "1 failed, 11 passed")
    assert complete["artifacts"] == ["test-log", "summary"]
    assert complete["protocolVersion"] == "1.0"


def test_the_js_client_streams_a_test_run(js_client_run: dict[str, dict[str, Any]]) -> None:
    stream = js_client_run["stream"]
    assert stream["events"] == (
        ["task", "statusUpdate:TASK_STATE_WORKING"] + ["artifactUpdate"] * 6 + ["statusUpdate:TASK_STATE_COMPLETED"]
    )
    assert (stream["state"], stream["status"]) == ("TASK_STATE_COMPLETED", "1 failed, 11 passed")


def test_the_js_client_answers_the_reviewers_question(js_client_run: dict[str, dict[str, Any]]) -> None:
    review = js_client_run["inputRequired"]
    assert review["asked"] == "TASK_STATE_INPUT_REQUIRED"
    assert review["question"] == "Which base branch should I compare this diff against?"
    assert review["sameTask"] is True
    assert (review["state"], review["status"]) == ("TASK_STATE_COMPLETED", "2 findings")
    assert review["diffKept"] is True


def test_the_js_client_cancels_a_full_suite_run(js_client_run: dict[str, dict[str, Any]]) -> None:
    cancel = js_client_run["cancel"]
    assert cancel["started"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert (cancel["state"], cancel["status"]) == ("TASK_STATE_CANCELED", "Canceled at the client's request.")
    assert cancel["fetched"] == "TASK_STATE_CANCELED"


def test_the_echo_server_answers_card_discovery_and_json_rpc() -> None:
    with EchoServer(node()) as echo:
        card = httpx.get(f"{echo.url}/.well-known/agent-card.json", timeout=10).json()
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": {"messageId": "echo-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}}
        reply = httpx.post(f"{echo.url}/a2a/jsonrpc", json=body, headers=A2A, timeout=10).json()
    assert card["name"] == "echo"
    assert card["supportedInterfaces"] == [
        {"url": f"{echo.url}/a2a/jsonrpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    assert reply["id"] == 1
    assert reply["result"]["message"]["role"] == "ROLE_AGENT"
    assert reply["result"]["message"]["parts"] == [{"text": "hello"}]
