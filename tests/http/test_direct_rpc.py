"""The direct path for SendMessage and GetTask (`a2a_bridge.http.direct_rpc`) against the SDK's dispatcher, over the wire:
two bridges alike but for `direct_rpc`, the same requests to each, byte for byte the same status, headers and body,
and the same warnings and errors logged (ids, timestamps and the server's own address normalised); the dispatcher is
reached on the direct bridge only for what the direct path hands on. The direct bridge's main app is served as `serve`
serves it, `FrontDoor` in front of the chain: the chain is reached only for what the front door hands on."""

import logging
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from a2a.server.context import ServerCallContext
from a2a.types import GetTaskRequest, Task
from a2a.utils import telemetry
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from a2a_bridge.agents.catalog import DEPLOYER_TOKEN, served_agents
from a2a_bridge.app import Bridge
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.http.direct_rpc import DEBUG_LOGS
from a2a_bridge.http.jsonrpc import BridgeJsonRpcDispatcher
from a2a_bridge.http.shutdown import Draining
from a2a_bridge.http.task_paths import TaskPaths
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.support import A2A, serve_in_thread, user_message
from tests.tasks.test_agent_errors import raiser_spec

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")
FRONT, DIRECT, SDK, NEITHER = "front", "direct", "sdk", "neither"
"""Who answers a request on the direct bridge: the direct path in the front door, the direct path behind the chain,
the SDK's dispatcher, or a layer in front of both."""

dispatched: list[int] = []
"""The port of each request the SDK's dispatcher handled, in order."""
chained: list[int] = []
"""The port of each request that went through the chain behind the front door (or through a server without one)."""


def counted_chain(app: ASGIApp) -> ASGIApp:
    async def counted(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            chained.append(scope["server"][1])
        await app(scope, receive, send)

    return counted


def fronted(served: Bridge, app: ASGIApp) -> ASGIApp:
    """`app` as `serve` serves the main app: `Draining` around it, uvicorn's proxy headers, the front door."""
    draining = Draining(app)
    return served.front(ProxyHeadersMiddleware(counted_chain(draining), "127.0.0.1"), draining)


class Records(logging.Handler):
    """Every warning and error logged, in order."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record)


records = Records()


@dataclass
class Served:
    """One bridge on the wire: all agents under /{name}/, and bench alone at the root of its kit app."""

    main: str
    kit: str
    answers: list[tuple[str, str, tuple[Any, ...]]] = field(default_factory=list)
    """(label, who answered, normalised answer) of each request sent."""
    ids: dict[str, str] = field(default_factory=dict)
    """Each UUID seen in an answer, bound to the placeholder it is shown as."""


def bridge(direct_rpc: bool, store: str) -> Bridge:
    """bench, test-runner, deployer and an agent that raises, on `store`."""
    specs = [*served_agents(["bench", "test-runner", "deployer"], pace=0.01), raiser_spec("raiser", after_working=True)]
    stores = Stores(StoreConfig.parse(store))
    return Bridge(specs, stores, SystemClock(), lambda: str(uuid.uuid4()), direct_rpc=direct_rpc)


@pytest.fixture(scope="module", params=["memory", "sqlite"])
def servers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Served]]:
    """The direct bridge (its main app in `TaskPaths`, as under --log-json) and the SDK-only bridge, with the
    dispatcher's calls counted by port; untraced, as `serve` runs without --trace (the SDK chooses once, when first
    imported, which in a test run may precede a2a_bridge). In memory, and on SQLite files, where a task's row keeps
    the texts of its items that the direct path's answer reuses (`item_texts.task_dict`)."""
    directory = tmp_path_factory.mktemp("direct-rpc")
    stores = {
        kind: "memory" if request.param == "memory" else f"sqlite:///{directory / kind}.db" for kind in ("direct", "stock")
    }
    original = BridgeJsonRpcDispatcher.handle_requests

    async def counted(self: BridgeJsonRpcDispatcher, request: Request) -> Response:
        dispatched.append(request.url.port or 0)
        return await original(self, request)

    async def broken(params: GetTaskRequest, context: ServerCallContext) -> Task:
        raise RuntimeError("a secret the caller must not see")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BridgeJsonRpcDispatcher, "handle_requests", counted)
        patch.setattr(telemetry, "otel_enabled", False)
        direct = bridge(direct_rpc=True, store=stores["direct"])
        stock = bridge(direct_rpc=False, store=stores["stock"])
        for each in (direct, stock):
            patch.setattr(each.agents["raiser"].handler, "on_get_task", broken)
        logging.getLogger().addHandler(records)
        try:
            with (
                serve_in_thread(fronted(direct, TaskPaths(direct.app(), direct.ledger))) as direct_main,
                serve_in_thread(counted_chain(direct.kit_app("bench"))) as direct_kit,
                serve_in_thread(counted_chain(stock.app())) as stock_main,
                serve_in_thread(counted_chain(stock.kit_app("bench"))) as stock_kit,
            ):
                yield Served(direct_main, direct_kit), Served(stock_main, stock_kit)
        finally:
            logging.getLogger().removeHandler(records)


def port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def normalised(server: Served, text: str) -> str:
    """The text with the server's addresses, UUIDs (bound one to one, in order of appearance) and timestamps
    replaced."""
    for base in (server.main, server.kit):
        text = text.replace(base, "<base>").replace(base.removeprefix("http://"), "<host>")

    def bind(match: re.Match[str]) -> str:
        return server.ids.setdefault(match[0], f"<id{len(server.ids)}>")

    return TIMESTAMP.sub("<time>", UUID.sub(bind, text))


def send(
    server: Served,
    label: str,
    who: str,
    body: dict[str, Any] | bytes,
    path: str = "/bench/a2a/jsonrpc",
    headers: dict[str, str] | None = None,
    kit: bool = False,
) -> dict[str, Any]:
    """POST one request; records the normalised answer (status, headers, body, the lines logged meanwhile) and who
    answered it; returns the parsed body ({} if not JSON)."""
    base = server.kit if kit else server.main
    content = body if isinstance(body, bytes) else httpx.Request("POST", "/", json=body).content
    before, through, logged = len(dispatched), len(chained), len(records.seen)
    response = httpx.post(f"{base}{path}", content=content, headers=A2A if headers is None else headers, timeout=30)
    answered_by = SDK if port(base) in dispatched[before:] else (NEITHER if who == NEITHER else DIRECT)
    if answered_by == DIRECT and port(base) not in chained[through:]:
        answered_by = FRONT
    assert response.headers.get("content-length") == str(len(response.content))
    raw_headers = tuple(
        (name.decode(), "<n>" if name == b"content-length" else normalised(server, value.decode()))
        for name, value in response.headers.raw
        if name != b"date"
    )
    lines = tuple(
        (r.name, r.levelname, normalised(server, r.getMessage()), type(r.exc_info[1]).__name__ if r.exc_info else "")
        for r in records.seen[logged:]
    )
    answer = (response.status_code, raw_headers, normalised(server, response.text), lines)
    server.answers.append((label, answered_by, answer))
    try:
        parsed: dict[str, Any] = response.json()
    except ValueError:
        parsed = {}
    return parsed


def envelope(method: str, params: Any, rpc_id: Any = 1, **extra: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params, **extra}


def task_of(answer: dict[str, Any]) -> str:
    return str(answer["result"]["task"]["id"])


def scenario(server: Served) -> list[tuple[str, str]]:
    """Sends every request of the comparison to one bridge; returns (label, who should answer on the direct bridge)."""
    expected: list[tuple[str, str]] = []

    def call(label: str, who: str, body: dict[str, Any] | bytes, **options: Any) -> dict[str, Any]:
        expected.append((label, who))
        return send(server, label, who, body, **options)

    def message(text: str, **extra: Any) -> dict[str, Any]:
        return {"message": user_message(text, f"m-{len(expected)}", **extra)}

    immediately = {"returnImmediately": True}
    plain_json = {"Content-Type": "application/json"}
    done = call("plain, int id", FRONT, envelope("SendMessage", message("hello")))
    call("string id", FRONT, envelope("SendMessage", message("hello"), "req-7"))
    call("no id", FRONT, {"jsonrpc": "2.0", "method": "SendMessage", "params": message("hello")})
    call("null id", FRONT, envelope("SendMessage", message("hello"), None))
    call("non-ASCII text", FRONT, envelope("SendMessage", message("héllo ✓ 日本")))
    call(
        "context, metadata, extensions, unknown fields",
        FRONT,
        envelope(
            "SendMessage",
            {
                "message": {**message("hello", contextId="ctx-1")["message"], "metadata": {"k": [1, 2.5, None]},
                            "extensions": ["https://example.com/ext"], "future": {"x": 1}},
                "metadata": {"trace": "abc"},
                "alsoUnknown": True,
            },
        ),
        headers={**A2A, "A2A-Extensions": "https://example.com/ext, https://example.com/other"},
    )
    asked = call("input required", FRONT, envelope("SendMessage", message("ask")))
    call(
        "follow-up to an interrupted task",
        FRONT,
        envelope("SendMessage", message("go on", taskId=task_of(asked))),
    )
    call("follow-up to a finished task (-32004)", FRONT, envelope("SendMessage", message("x", taskId=task_of(done))))
    call("unknown task id", FRONT, envelope("SendMessage", message("hi", taskId="no-such-task")))
    call("returnImmediately", FRONT, envelope("SendMessage", {**message("ask"), "configuration": immediately}))
    for label, length in (("historyLength 0", 0), ("historyLength < 0", -1)):
        call(label, FRONT, envelope("SendMessage", {**message("hi"), "configuration": {"historyLength": length}}))
    call("empty params", FRONT, envelope("SendMessage", {}))
    call("unknown enum value", FRONT, envelope("SendMessage", {"message": {**message("x")["message"], "role": "NEW"}}))
    call("bad version", FRONT, envelope("SendMessage", message("hello")), headers={**A2A, "A2A-Version": "0.3"})
    call("missing version", FRONT, envelope("SendMessage", message("hello")), headers=plain_json)
    call(
        "version in the query",
        DIRECT,
        envelope("SendMessage", message("hello")),
        path="/bench/a2a/jsonrpc?A2A-Version=1.0",
        headers=plain_json,
    )
    call("GetTask", FRONT, envelope("GetTask", {"id": task_of(done), "historyLength": 1}, "g-1"))
    call("GetTask unknown", FRONT, envelope("GetTask", {"id": "no-such-task"}))
    call("GetTask bad version", FRONT, envelope("GetTask", {"id": task_of(done)}), headers={**A2A, "A2A-Version": "2"})
    runner, deployer = "/test-runner/a2a/jsonrpc", "/deployer/a2a/jsonrpc"
    call("test-runner", FRONT, envelope("SendMessage", message("Run the unit tests at commit 9f3c2e1")), path=runner)
    call("test-runner asks", FRONT, envelope("SendMessage", message("Run the unit tests")), path=runner)
    deploy = envelope("SendMessage", message("deploy build 7 to staging"))
    call("deployer without token", NEITHER, deploy, path=deployer)
    call("deployer", FRONT, deploy, path=deployer, headers={**A2A, "Authorization": f"Bearer {DEPLOYER_TOKEN}"})
    raiser = "/raiser/a2a/jsonrpc"
    call("agent raises (-32603 with taskId)", FRONT, envelope("SendMessage", message("boom")), path=raiser)
    call("handler raises (-32603)", FRONT, envelope("GetTask", {"id": "x"}), path=raiser)
    call("unknown agent", NEITHER, envelope("SendMessage", message("hello")), path="/nobody/a2a/jsonrpc")
    call("kit app", DIRECT, envelope("SendMessage", message("hello")), path="/a2a/jsonrpc", kit=True)
    call("kit app GetTask unknown", DIRECT, envelope("GetTask", {"id": "nope"}, "k"), path="/a2a/jsonrpc", kit=True)
    call("params not an object", SDK, envelope("SendMessage", [1, 2]))
    call("params missing", SDK, {"jsonrpc": "2.0", "id": 3, "method": "SendMessage"})
    call("message a string, which parses as an empty message", FRONT, envelope("SendMessage", {"message": "text"}))
    call("params that do not parse", SDK, envelope("SendMessage", {"message": 5}))
    call("params of the wrong type", SDK, envelope("SendMessage", {"message": {"parts": 5}}))
    call("jsonrpc 1.0", SDK, {**envelope("SendMessage", message("hello")), "jsonrpc": "1.0"})
    call("boolean id", SDK, envelope("SendMessage", message("hello"), True))
    call("float id", SDK, envelope("SendMessage", message("hello"), 1.5))
    call("extra member", SDK, envelope("SendMessage", message("hello"), extra=1))
    call("other method", SDK, envelope("ListTasks", {}))
    call("GetTask params that do not parse", SDK, envelope("GetTask", {"id": 5}))
    with_bom = b"\xef\xbb\xbf" + httpx.Request("POST", "/", json=envelope("SendMessage", message("bom"))).content
    call("byte order mark", SDK, with_bom)
    a2a_json = {"A2A-Version": "1.0", "Content-Type": "application/a2a+json"}
    call("Accept a2a+json", FRONT, envelope("SendMessage", message("hello")), headers={**A2A, "Accept": "application/a2a+json"})
    call("Content-Type a2a+json", FRONT, envelope("SendMessage", message("hello")), headers=a2a_json)
    call("GetTask, a2a+json", FRONT, envelope("GetTask", {"id": task_of(done)}), headers=a2a_json)
    call("same-site Origin", DIRECT, envelope("SendMessage", message("hello")), headers={**A2A, "Origin": server.main})
    call("cross-site Origin", NEITHER, envelope("SendMessage", message("hello")), headers={**A2A, "Origin": "http://example.com"})
    call("forwarded", DIRECT, envelope("SendMessage", message("hello")), headers={**A2A, "X-Forwarded-For": "10.0.0.1"})
    call("text body", NEITHER, envelope("SendMessage", message("hello")), headers={"A2A-Version": "1.0", "Content-Type": "text/plain"})
    call("deployer, unknown token", NEITHER, deploy, path=deployer, headers={**A2A, "Authorization": "Bearer nope"})
    call("trailing slash", DIRECT, envelope("SendMessage", message("hello")), path="/bench/a2a/jsonrpc/")
    return expected


def test_the_direct_path_answers_as_the_sdk_does(servers: tuple[Served, Served]) -> None:
    direct, stock = servers
    expected = scenario(direct)
    scenario(stock)
    assert [(label, who) for label, who, _ in direct.answers] == expected
    assert all(who == (NEITHER if want == NEITHER else SDK) for (_, who, _), (_, want) in zip(stock.answers, expected))
    for (label, _, mine), (_, _, theirs) in zip(direct.answers, stock.answers, strict=True):
        assert mine == theirs, label


def test_the_direct_path_steps_aside_while_the_sdk_logs_at_debug_level(servers: tuple[Served, Served]) -> None:
    direct, _ = servers
    before = [log.level for log in DEBUG_LOGS]
    for log in DEBUG_LOGS:
        log.setLevel(logging.DEBUG)
    try:
        send(direct, "debug", SDK, envelope("SendMessage", {"message": user_message("hello", "debug-1")}))
    finally:
        for log, level in zip(DEBUG_LOGS, before):
            log.setLevel(level)
    send(direct, "after", FRONT, envelope("SendMessage", {"message": user_message("hello", "debug-2")}))
    assert [who for _, who, _ in direct.answers[-2:]] == [SDK, FRONT]


def test_the_direct_path_steps_aside_while_the_sdk_traces(servers: tuple[Served, Served]) -> None:
    direct, _ = servers
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(telemetry, "otel_enabled", True)
        send(direct, "traced", SDK, envelope("SendMessage", {"message": user_message("hello", "trace-1")}))
    send(direct, "after", FRONT, envelope("SendMessage", {"message": user_message("hello", "trace-2")}))
    assert [who for _, who, _ in direct.answers[-2:]] == [SDK, FRONT]
