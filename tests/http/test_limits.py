"""Limits (body size, parts, text size, history, streams per principal) and error text: past each limit a clear
error and nothing stored changes; no error carries exception text, a trace or a path."""

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.security_support import (
    ALICE,
    BOB,
    get_task,
    message,
    review_message,
    start,
    wait_state,
    write_config,
)
from tests.support import A2A, ServerProcess, rpc, wait_for

LIMITS = """
[limits]
max_body_bytes = 8192
max_parts = 3
max_text_bytes = 100
max_history = 4
max_streams = 2
"""
LEAKS = ("Traceback", 'File "', "/work", "site-packages", ".py", "Expecting", "line 1 column", "Failed to parse")
"""What exception text, a stack trace or a path would show in an answer."""


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("limits")
    config = write_config(directory, LIMITS)
    process = ServerProcess(f"sqlite:///{directory / 'b.db'}", pace=0.4, extra=["--config", str(config), "--require-auth"])
    process.start()
    yield process
    process.stop()


def tasks_of(server: ServerProcess, agent: str, headers: dict[str, str]) -> list[str]:
    listed = rpc(server.agent(agent), "ListTasks", {}, headers=headers)["result"]
    return sorted(task["id"] for task in listed.get("tasks", []))


def fields(reply: dict[str, Any]) -> list[str]:
    details = reply["error"]["data"]
    return [v["field"] for d in details if d.get("@type", "").endswith("BadRequest") for v in d["fieldViolations"]]


def assert_no_leak(text: str) -> None:
    assert not [leak for leak in LEAKS if leak in text], text


def test_a_body_over_the_limit_is_413_on_every_path_and_nothing_is_stored(limited: ServerProcess) -> None:
    runner = limited.agent("test-runner")
    before = tasks_of(limited, "test-runner", ALICE)
    big = message("x" * 9000)
    rpc_body = {"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {"message": big}}
    headers = {**A2A, **ALICE}
    answer = httpx.post(f"{runner}/a2a/jsonrpc", json=rpc_body, headers=headers, timeout=10)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == -32600
    assert answer.json()["error"]["data"][0]["metadata"] == {"limit": "max_body_bytes", "max": 8192}
    rest = httpx.post(f"{runner}/a2a/rest/message:send", json={"message": big}, headers=headers, timeout=10)
    assert rest.status_code == 413 and rest.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert rest.headers["content-type"] == "application/json"

    def chunks() -> Iterator[bytes]:
        yield json.dumps(rpc_body).encode()

    chunked = httpx.post(f"{runner}/a2a/jsonrpc", content=chunks(), headers=headers, timeout=10)
    assert chunked.status_code == 413
    review = httpx.post(f"{limited.agent('code-reviewer')}/tasks/x/review", content=b" " * 9000, headers=ALICE, timeout=10)
    assert review.status_code == 413
    assert tasks_of(limited, "test-runner", ALICE) == before


def test_parts_and_text_past_their_limits_are_refused_naming_the_field(limited: ServerProcess) -> None:
    runner = limited.agent("test-runner")
    before = tasks_of(limited, "test-runner", ALICE)
    four = {**message("Run the unit tests"), "parts": [{"text": "a"}] * 4}
    assert fields(rpc(runner, "SendMessage", {"message": four}, headers=ALICE)) == ["message.parts"]
    long_text = message("é" * 51)
    assert fields(rpc(runner, "SendMessage", {"message": long_text}, headers=ALICE)) == ["message.parts[0].text"]
    assert fields(rpc(runner, "SendStreamingMessage", {"message": long_text}, headers=ALICE)) == ["message.parts[0].text"]
    rest = httpx.post(f"{runner}/a2a/rest/message:send", json={"message": four}, headers={**A2A, **ALICE}, timeout=10)
    assert rest.status_code == 400
    violations = rest.json()["error"]["details"][1]["fieldViolations"]
    assert [v["field"] for v in violations] == ["message.parts"]
    assert tasks_of(limited, "test-runner", ALICE) == before
    at_limit = {**message("x" * 100), "parts": [{"text": "Run the unit tests"}, {"text": "x" * 100}, {"text": "y"}]}
    assert "result" in rpc(runner, "SendMessage", {"message": at_limit}, headers=ALICE)


def test_history_is_capped_and_a_larger_history_length_is_refused(limited: ServerProcess) -> None:
    reviewer = limited.agent("code-reviewer")
    task = start(reviewer, review_message("Review this diff of payments-api"), ALICE)
    answered = rpc(reviewer, "SendMessage", {"message": message("main", taskId=task["id"])}, headers=ALICE)["result"]["task"]
    assert len(answered["history"]) == 4
    full = get_task(reviewer, task["id"], ALICE)
    assert len(full["history"]) == 4
    assert full["history"][-1] == answered["history"][-1]
    assert len(rpc(reviewer, "GetTask", {"id": task["id"], "historyLength": 2}, headers=ALICE)["result"]["history"]) == 2
    too_many = rpc(reviewer, "GetTask", {"id": task["id"], "historyLength": 5}, headers=ALICE)
    assert too_many["error"]["code"] == -32602 and fields(too_many) == ["historyLength"]
    listed = rpc(reviewer, "ListTasks", {"historyLength": 5}, headers=ALICE)
    assert fields(listed) == ["historyLength"]
    rest = httpx.get(f"{reviewer}/a2a/rest/tasks/{task['id']}?historyLength=5", headers={**A2A, **ALICE}, timeout=10)
    assert rest.status_code == 400
    before = tasks_of(limited, "code-reviewer", ALICE)
    sent = rpc(reviewer, "SendMessage", {"message": review_message("Review"), "configuration": {"historyLength": 5}}, headers=ALICE)
    assert fields(sent) == ["configuration.historyLength"]
    assert tasks_of(limited, "code-reviewer", ALICE) == before


def open_stream(stack: ExitStack, url: str, headers: dict[str, str], body: Any = None) -> httpx.Response:
    method = "POST" if body is not None else "GET"
    response = stack.enter_context(httpx.stream(method, url, json=body, headers={**A2A, **headers}, timeout=30))
    return response


def test_streams_past_the_principals_limit_are_429_and_free_again_once_closed(limited: ServerProcess) -> None:
    runner = limited.agent("test-runner")
    suite = "Run the full suite for payments-api at commit 4e1c2b7"
    tasks = [start(runner, message(suite), ALICE, immediately=True) for _ in range(2)]
    subscribe = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": tasks[0]["id"]}}
    with ExitStack() as stack:
        first = open_stream(stack, f"{runner}/a2a/jsonrpc", ALICE, subscribe)
        second = open_stream(stack, f"{runner}/tasks/{tasks[1]['id']}/status/stream", ALICE)
        assert first.status_code == 200 and second.status_code == 200
        before = tasks_of(limited, "test-runner", ALICE)
        refused = httpx.post(f"{runner}/a2a/jsonrpc", json=subscribe, headers={**A2A, **ALICE}, timeout=10)
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == -32600
        assert refused.json()["error"]["data"][0]["metadata"] == {"limit": "max_streams", "max": 2}
        params = {"message": message("Run the unit tests")}
        streaming = {"jsonrpc": "2.0", "id": 2, "method": "SendStreamingMessage", "params": params}
        assert httpx.post(f"{runner}/a2a/jsonrpc", json=streaming, headers={**A2A, **ALICE}, timeout=10).status_code == 429
        rest = httpx.get(f"{runner}/a2a/rest/tasks/{tasks[0]['id']}:subscribe", headers={**A2A, **ALICE}, timeout=10)
        assert rest.status_code == 429 and rest.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        status = httpx.get(f"{runner}/tasks/{tasks[0]['id']}/status/stream", headers=ALICE, timeout=10)
        assert status.status_code == 429
        assert tasks_of(limited, "test-runner", ALICE) == before
        bobs = {**subscribe, "params": {"id": "not-bobs"}}
        other = httpx.post(f"{runner}/a2a/jsonrpc", json=bobs, headers={**A2A, **BOB}, timeout=10)
        assert other.status_code == 200, "another principal has streams of their own"

    def reopened() -> bool:
        with httpx.stream("POST", f"{runner}/a2a/jsonrpc", json=subscribe, headers={**A2A, **ALICE}, timeout=30) as again:
            return again.status_code == 200

    wait_for(reopened, timeout=20, what="a stream slot to be given back")
    for task in tasks:
        wait_state(runner, task["id"], ALICE, "TASK_STATE_COMPLETED", timeout=60)


MALFORMED = [
    ("POST", "/a2a/rest/message:send", b'{"message": '),
    ("POST", "/a2a/rest/message:send", b'{"message": {"parts": 5}}'),
    ("POST", "/a2a/rest/message:stream", b'{"message": {"role": 7}}'),
    ("POST", "/a2a/rest/message:send", b"[" * 3000 + b"]" * 3000),
    ("POST", "/a2a/rest/message:send", b'{"message": "\xff\xfe"}'),
    ("POST", "/a2a/rest/tasks/x/pushNotificationConfigs", b'{"url": ['),
    ("GET", "/a2a/rest/tasks/x?historyLength=abc", b""),
    ("GET", "/a2a/rest/tasks?pageSize=abc", b""),
    ("GET", "/a2a/rest/tasks?status=-1", b""),
    ("GET", "/a2a/rest/tasks?status=99", b""),
    ("POST", "/a2a/jsonrpc", b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": 5}}'),
    ("POST", "/a2a/jsonrpc", b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"parts": [{"text": 1}]}}}'),
    ("POST", "/a2a/jsonrpc", b"{not json"),
    ("POST", "/a2a/jsonrpc", b"[" * 3000 + b"]" * 3000),
    ("POST", "/a2a/jsonrpc", b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "\xff"}}'),
    ("POST", "/a2a/jsonrpc", b'{"jsonrpc": "1.0", "id": {"x": 1}, "method": 5}'),
    ("POST", "/a2a/jsonrpc", b'{"jsonrpc": "2.0", "id": 1, "method": ["SendStreamingMessage"]}'),
    ("POST", "/tasks/x/reconcile", b"{not json"),
    ("POST", "/tasks/x/review", b"\xff\xfe\xfd"),
]


@pytest.mark.parametrize(("verb", "path", "body"), MALFORMED)
def test_no_error_carries_exception_text_a_trace_or_a_path(limited: ServerProcess, verb: str, path: str, body: bytes) -> None:
    agent = "code-reviewer" if path.startswith("/tasks/") else "test-runner"
    response = httpx.request(verb, limited.agent(agent) + path, content=body, headers={**A2A, **ALICE}, timeout=10)
    assert response.status_code < 500
    assert_no_leak(response.text)


def test_limits_come_from_the_environment_too(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    env_server = ServerProcess("memory", extra=["--config", str(config)], env={"A2A_BRIDGE_MAX_PARTS": "1"}).start()
    try:
        two = {**message("Run the unit tests"), "parts": [{"text": "a"}, {"text": "b"}]}
        assert fields(rpc(env_server.agent("test-runner"), "SendMessage", {"message": two})) == ["message.parts"]
    finally:
        env_server.stop()
