"""`AgentMounts` hands an agent's app the scope Starlette's `Mount` would, and leaves every other path to Starlette;
an agent cannot take the console's name."""

import asyncio
import copy

import httpx
import pytest
from a2a.types import AgentCard
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from a2a_bridge import Agent
from a2a_bridge.agents.bench import Bench
from a2a_bridge.http.agent_mounts import AgentMounts
from tests.support import ServerProcess, rpc, user_message


async def other(_request: object) -> PlainTextResponse:
    return PlainTextResponse("other")


class Recorder:
    """An ASGI app that keeps the scope it was called with and answers 200."""

    def __init__(self) -> None:
        self.scopes: list[Scope] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scopes.append(dict(scope))
        await PlainTextResponse("agent")(scope, receive, send)


def http_scope(path: str, root_path: str = "") -> Scope:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "root_path": root_path, "query_string": b"", "headers": [],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2), "state": {},
    }


async def call(app: object, scope: Scope) -> int:
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)  # type: ignore[operator]
    return sent[0]["status"]


@pytest.mark.parametrize("path", ["/a/a2a/jsonrpc", "/a/", "/a/tasks/t-1/status", "/a/a2a/jsonrpc/"])
def test_an_agent_app_gets_the_scope_starlettes_mount_gives_it(path: str) -> None:
    recorder = Recorder()
    starlette = Starlette(routes=[Route("/other", other, methods=["POST"]), Mount("/a", app=recorder)])
    mounts = AgentMounts(starlette, {"a": starlette.routes[1]})

    assert asyncio.run(call(starlette, http_scope(path))) == 200
    assert asyncio.run(call(mounts, http_scope(path))) == 200

    through_starlette, through_mounts = recorder.scopes
    assert "starlette.exception_handlers" not in through_mounts
    del through_starlette["starlette.exception_handlers"]
    assert through_mounts == through_starlette
    assert through_mounts["root_path"] == "/a" and through_mounts["path"] == path


@pytest.mark.parametrize(("path", "status"), [("/other", 200), ("/a", 307), ("/b/a2a/jsonrpc", 404), ("/", 404)])
def test_what_names_no_agent_is_starlettes_to_answer(path: str, status: int) -> None:
    recorder = Recorder()
    starlette = Starlette(routes=[Route("/other", other, methods=["POST"]), Mount("/a", app=recorder)])
    mounts = AgentMounts(starlette, {"a": starlette.routes[1]})

    assert asyncio.run(call(mounts, http_scope(path))) == asyncio.run(call(starlette, http_scope(path))) == status
    assert recorder.scopes == []


def test_a_scope_is_not_shared_between_two_requests() -> None:
    recorder = Recorder()
    mount = Mount("/a", app=recorder)
    mounts = AgentMounts(Starlette(routes=[mount]), {"a": mount})
    first = http_scope("/a/x")
    pristine = copy.deepcopy(first)
    asyncio.run(call(mounts, first))
    second = http_scope("/a/x")
    asyncio.run(call(mounts, second))
    assert second["root_path"] == "/a" and pristine["root_path"] == ""


def test_an_agent_cannot_be_named_for_the_console() -> None:
    with pytest.raises(ValueError, match="/console/ is the server's own"):
        Agent("console", AgentCard(name="console"), Bench())


def test_the_server_answers_agents_and_its_own_paths(server: ServerProcess) -> None:
    reply = rpc(server.agent("test-runner"), "SendMessage",
                {"message": user_message("Run the unit tests for payments-api at commit 9f3c2e1", "mounts-1")})
    assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    with httpx.Client(base_url=server.url, timeout=10) as client:
        slashed = client.post("/test-runner/a2a/jsonrpc/", json={"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                              "params": {"id": reply["result"]["task"]["id"]}}, headers={"A2A-Version": "1.0"})
        assert slashed.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert client.get("/test-runner").status_code == 307
        assert client.get("/nobody/.well-known/agent-card.json").status_code == 404
        assert client.get("/console/").status_code == 200
        assert client.get("/healthz").json() == {"status": "up"}
