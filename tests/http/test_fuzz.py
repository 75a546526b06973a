"""Property-based fuzzing (hypothesis): malformed, oversized, deeply nested, wrongly typed and invalid UTF-8 requests
to every JSON-RPC method, every HTTP+JSON route and every bridge endpoint. The server never answers 5xx, never shows
exception text, keeps answering, and alice's stored tasks stay as they were (the requests come from bob, aimed at her
task ids among others). Examples are derandomized and bounded per target; the number of requests is printed."""

import asyncio
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security_support import (
    ALICE,
    BOB,
    get_task,
    message,
    review_message,
    start,
    status_body,
    write_config,
)
from tests.support import ServerProcess

EXAMPLES = int(os.environ.get("A2A_BRIDGE_FUZZ_EXAMPLES", "200"))
"""Examples per target; each sends one request (a few hundred per method, as CI can afford)."""
BODY_LIMIT = 65_536
STREAM_READ = 3.0
"""Seconds a streamed answer is read before the client closes it."""
LIMITS = f"\n[limits]\nmax_body_bytes = {BODY_LIMIT}\nmax_streams = 64\nmax_tasks_per_minute = 1000000\n"
"""Streams and task starts enough that every example reaches its handler (the fuzzer is one principal)."""
LEAKS = ("Traceback", 'File "', "/work/", "site-packages", ".py\"", "Expecting value", "line 1 column", "Failed to parse")
JSONRPC_METHODS = (
    "SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask",
    "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig", "GetExtendedAgentCard",
)
KEYS = (
    "id", "taskId", "contextId", "message", "messageId", "role", "parts", "text", "data", "raw", "url", "mediaType",
    "filename", "metadata", "configuration", "historyLength", "pageSize", "pageToken", "returnImmediately",
    "taskPushNotificationConfig", "token", "authentication", "scheme", "credentials", "status", "referenceTaskIds",
    "extensions", "tenant", "outcome", "evidence", "provider", "decision", "acceptedOutputModes", "includeArtifacts",
)


@dataclass(frozen=True)
class Target:
    """One method or route: where to send, how, and whether the answer may be a stream."""

    name: str
    agent: str
    verb: str
    path: str
    """With {id} for a task id and {config} for a push config id."""
    rpc_method: str | None = None
    body: bool = True
    query: bool = False


TARGETS = [
    *(Target(f"JSON-RPC {m}", "test-runner", "POST", "/a2a/jsonrpc", rpc_method=m) for m in JSONRPC_METHODS),
    Target("JSON-RPC unknown or broken envelope", "test-runner", "POST", "/a2a/jsonrpc", rpc_method=""),
    Target("REST message:send", "test-runner", "POST", "/a2a/rest/message:send"),
    Target("REST message:stream", "test-runner", "POST", "/a2a/rest/message:stream"),
    Target("REST get task", "test-runner", "GET", "/a2a/rest/tasks/{id}", body=False, query=True),
    Target("REST list tasks", "test-runner", "GET", "/a2a/rest/tasks", body=False, query=True),
    Target("REST cancel", "test-runner", "POST", "/a2a/rest/tasks/{id}:cancel"),
    Target("REST subscribe", "test-runner", "GET", "/a2a/rest/tasks/{id}:subscribe", body=False),
    Target("REST create push config", "test-runner", "POST", "/a2a/rest/tasks/{id}/pushNotificationConfigs"),
    Target("REST list push configs", "test-runner", "GET", "/a2a/rest/tasks/{id}/pushNotificationConfigs", body=False, query=True),
    Target("REST get push config", "test-runner", "GET", "/a2a/rest/tasks/{id}/pushNotificationConfigs/{config}", body=False),
    Target("REST delete push config", "test-runner", "DELETE", "/a2a/rest/tasks/{id}/pushNotificationConfigs/{config}", body=False),
    Target("REST extended card", "deployer", "GET", "/a2a/rest/extendedAgentCard", body=False),
    Target("status", "code-reviewer", "GET", "/tasks/{id}/status", body=False, query=True),
    Target("status stream", "code-reviewer", "GET", "/tasks/{id}/status/stream", body=False),
    Target("claim", "test-runner", "GET", "/tasks/{id}/claim", body=False),
    Target("reconcile", "deployer", "POST", "/tasks/{id}/reconcile"),
    Target("operator cancel", "code-reviewer", "POST", "/tasks/{id}/cancel"),
    Target("approve", "deployer", "POST", "/approve/{id}"),
    Target("authorize", "deployer", "POST", "/tasks/{id}/authorize"),
    Target("review", "code-reviewer", "POST", "/tasks/{id}/review"),
]


@dataclass
class Tally:
    requests: int = 0
    health_checks: int = 0


TALLY = Tally()


async def pg_admin(server: str, statement: str) -> None:
    connection = await asyncpg.connect(server)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh PostgreSQL database when the tests have one (its columns are the strictest), else a SQLite file."""
    server = os.environ.get("A2A_BRIDGE_PG_URL")
    if not server:
        yield f"sqlite:///{tmp_path_factory.mktemp('fuzz-store') / 'b.db'}"
        return
    name = f"fuzz_{uuid.uuid4().hex[:12]}"
    asyncio.run(pg_admin(server, f"CREATE DATABASE {name}"))
    yield server.rsplit("/", 1)[0] + f"/{name}"
    asyncio.run(pg_admin(server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config, store: str) -> Iterator[ServerProcess]:
    config = write_config(tmp_path_factory.mktemp("fuzz"), LIMITS)
    process = ServerProcess(store, pace=0.01, extra=["--config", str(config), "--require-auth"]).start()
    started = time.monotonic()
    yield process
    process.stop()
    line = (
        f"fuzz: {TALLY.requests} requests to {len(TARGETS)} targets ({EXAMPLES} examples each) on {store.split(':')[0]}, "
        f"{TALLY.health_checks} liveness checks, {time.monotonic() - started:.0f} s"
    )
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)


@pytest.fixture(scope="module")
def alices(fuzzed: ServerProcess) -> dict[str, str]:
    """alice's tasks, in the states fuzzed requests could disturb: finished (with a push config), asking for input,
    waiting for her review and for an operator's approval. Keys are "agent/id"."""
    runner, reviewer, deployer = (fuzzed.agent(a) for a in ("test-runner", "code-reviewer", "deployer"))
    done = start(runner, message("Run the unit tests for payments-api at commit 9f3c2e1"), ALICE)
    body = {"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig",
            "params": {"taskId": done["id"], "id": "alice-hook", "url": "http://127.0.0.1:9/hook"}}
    assert "result" in httpx.post(f"{runner}/a2a/jsonrpc", json=body, headers=headers_for(ALICE), timeout=10).json()
    tasks = [
        ("test-runner", done),
        ("code-reviewer", start(reviewer, review_message("Review this diff of payments-api"), ALICE)),
        ("code-reviewer", start(reviewer, review_message("Review this diff against main, ask me before posting"), ALICE)),
        ("deployer", start(deployer, message("Deploy build 2026.10.06-1 to staging"), ALICE)),
    ]
    return {task["id"]: agent for agent, task in tasks}


def headers_for(principal: dict[str, str]) -> dict[str, str]:
    return {"A2A-Version": "1.0", "Content-Type": "application/json", **principal}


def snapshot(server: ServerProcess, tasks: dict[str, str]) -> dict[str, Any]:
    """What alice reads of each of her tasks: the task, its status view (revision) and, for test-runner, its configs."""
    seen: dict[str, Any] = {}
    for task_id, agent in tasks.items():
        base = server.agent(agent)
        seen[task_id] = {"task": get_task(base, task_id, ALICE), "status": status_body(base, task_id, ALICE)}
        if agent == "test-runner":
            body = {"jsonrpc": "2.0", "id": 1, "method": "ListTaskPushNotificationConfigs", "params": {"taskId": task_id}}
            configs = httpx.post(f"{base}/a2a/jsonrpc", json=body, headers=headers_for(ALICE), timeout=10)
            seen[task_id]["configs"] = configs.json()
    return seen


@pytest.fixture(scope="module")
def before(fuzzed: ServerProcess, alices: dict[str, str]) -> dict[str, Any]:
    return snapshot(fuzzed, alices)


json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=False),
    st.text(max_size=30), st.sampled_from(["", "ROLE_USER", "ROLE_AGENT", "TASK_STATE_WORKING", "text/x-diff", "2.0"]),
)
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=16,
)


def task_ids(alices: dict[str, str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(sorted(alices)), st.text(max_size=70), st.just(""), st.just("../../etc/passwd"),
        st.just("%00"), st.uuids().map(str),
    )


def shaped(alices: dict[str, str]) -> st.SearchStrategy[Any]:
    """JSON in the shape of A2A params (known keys, messages with parts), with wrong types mixed in."""
    ids = task_ids(alices)
    part_keys = st.sampled_from(["text", "data", "raw", "url", "mediaType", "filename", "metadata"])
    part = st.dictionaries(part_keys, json_values | ids, max_size=3)
    msg = st.fixed_dictionaries(
        {"messageId": st.text(max_size=20) | json_values, "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", 3, None, ""])},
        optional={"parts": st.lists(part, max_size=5) | json_values, "taskId": ids | json_values, "contextId": ids,
                  "metadata": json_values, "referenceTaskIds": st.lists(ids, max_size=3)},
    )
    value = st.one_of(json_values, ids, msg, st.dictionaries(st.sampled_from(KEYS), json_values | ids, max_size=4))
    return st.dictionaries(st.sampled_from(KEYS), value, max_size=6) | json_values


@st.composite
def encoded(draw: st.DrawFn, value: Any) -> bytes:
    """A JSON value as bytes, sometimes broken: truncated, invalid UTF-8, nested past any parser, oversized, garbage."""
    text = json.dumps(value).encode()
    modes = ["plain", "plain", "plain", "truncated", "invalid utf-8", "nested", "oversized", "garbage", "empty"]
    mode = draw(st.sampled_from(modes))
    if mode == "truncated":
        return text[: draw(st.integers(min_value=0, max_value=max(0, len(text) - 1)))]
    if mode == "invalid utf-8":
        at = draw(st.integers(min_value=0, max_value=len(text)))
        broken = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]))
        return text[:at] + broken + text[at:]
    if mode == "nested":
        depth = draw(st.sampled_from([50, 101, 999, 5000, 20000]))
        opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
        return opener * depth + b"1" + closer * depth
    if mode == "oversized":
        return json.dumps({"pad": "x" * (BODY_LIMIT + 1), "value": value}).encode()
    if mode == "garbage":
        return draw(st.binary(max_size=200))
    if mode == "empty":
        return b""
    return text


@st.composite
def requests(draw: st.DrawFn, target: Target, alices: dict[str, str]) -> "Request":
    """(verb, path with query, headers, body) for one request to the target."""
    ids = task_ids(alices)
    config_id = draw(st.text(max_size=20) | st.just("alice-hook"))
    path = target.path.format(id=quote(draw(ids), safe=""), config=quote(config_id, safe=""))
    if target.query:
        query = draw(st.dictionaries(
            st.sampled_from(["historyLength", "pageSize", "pageToken", "contextId", "status", "wait", "includeArtifacts", "x"]),
            st.sampled_from(["-1", "0", "1", "5", "abc", "1e9", "nan", "101", "0.01", "61", "%ff", ""]) | st.text(max_size=8),
            max_size=3,
        ))
        path += "?" + "&".join(f"{quote(k)}={quote(v, safe='%')}" for k, v in query.items())
    if target.rpc_method is not None:
        method = target.rpc_method or draw(st.sampled_from(["", "Nope", "message/send", "tasks/get"]) | st.text(max_size=12))
        envelope = draw(st.fixed_dictionaries(
            {"jsonrpc": st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2, None]),
             "id": st.one_of(st.integers(), st.text(max_size=8), st.none(), st.booleans(), st.lists(st.integers(), max_size=2)),
             "method": st.just(method) | json_values, "params": shaped(alices)},
        ))
        body = draw(encoded(envelope if draw(st.integers(0, 9)) else draw(json_values)))
    elif target.body:
        body = draw(encoded(draw(shaped(alices))))
    else:
        body = b""
    headers: dict[str, str | bytes] = dict(headers_for(BOB))
    version = draw(st.sampled_from(["1.0", "1.0", "1.0", None, "0.3", "\u00e9"]))
    if version is None:
        del headers["A2A-Version"]
    else:
        headers["A2A-Version"] = version.encode()
    headers["Content-Type"] = draw(st.sampled_from(["application/json", "application/a2a+json", "text/plain", ""]))
    return target.verb, path, headers, body


Request = tuple[str, str, dict[str, str | bytes], bytes]


def send(client: httpx.Client, base: str, request: Request) -> tuple[int, str]:
    """Send one request; the status and as much of the body as arrives within STREAM_READ seconds."""
    verb, path, headers, body = request
    TALLY.requests += 1
    chunks: list[bytes] = []
    deadline = time.monotonic() + STREAM_READ
    with client.stream(verb, base + path, headers=headers, content=body) as response:
        try:
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    break
        except httpx.ReadTimeout:
            pass
    return response.status_code, b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize("target", TARGETS, ids=lambda target: target.name)
def test_fuzzed_requests_never_get_a_5xx_or_exception_text(
    fuzzed: ServerProcess, alices: dict[str, str], before: dict[str, Any], target: Target
) -> None:
    base = fuzzed.agent(target.agent)
    with httpx.Client(timeout=httpx.Timeout(10.0, read=STREAM_READ)) as client:

        @settings(
            max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        )
        @given(st.data())
        def one_request(data: st.DataObject) -> None:
            request = data.draw(requests(target, alices), label="request")
            status, text = send(client, base, request)
            assert status < 500, (status, text[:500])
            leaked = [leak for leak in LEAKS if leak in text]
            assert not leaked, (leaked, text[:500])
            TALLY.health_checks += 1
            assert client.get(f"{fuzzed.url}/", timeout=10).status_code == 200

        one_request()
    assert snapshot(fuzzed, alices) == before
