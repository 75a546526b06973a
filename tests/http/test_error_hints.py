"""Errors that say what to do (issue 32 item 6), through a real server: `Method not found` names the method and, for
an A2A 0.3 name, the 1.0 one; a missing `A2A-Version` says what to send; a path no agent serves answers JSON naming
the agents; a GET on a POST-only link answers 405 with `Allow: POST` and what to send; the server's own well-known
card is the agent's when one agent is served (`create_client(root)` works), else a JSON 404 naming each card. Each
keeps its JSON-RPC code and HTTP status, and repeats nothing of the request but a method name of safe characters."""

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from a2a.client import create_client
from a2a.client.errors import AgentCardResolutionError
from a2a.types import Message, Part, Role, SendMessageRequest

from tests.support import A2A, DEPLOYER_TOKEN, ServerProcess, rpc, user_message

AGENTS = ("test-runner", "code-reviewer", "deployer")


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    process = ServerProcess("memory").start()
    yield process
    process.stop()


def listed(server: ServerProcess) -> list[dict[str, str]]:
    return [{"name": name, "card": f"{server.agent(name)}/.well-known/agent-card.json"} for name in AGENTS]


@pytest.mark.parametrize(
    ("old", "new"),
    [("message/send", "SendMessage"), ("message/stream", "SendStreamingMessage"), ("tasks/get", "GetTask"),
     ("tasks/resubscribe", "SubscribeToTask"), ("agent/getAuthenticatedExtendedCard", "GetExtendedAgentCard")],
)
def test_a_0_3_method_name_is_told_its_1_0_name(server: ServerProcess, old: str, new: str) -> None:
    reply = rpc(server.agent("test-runner"), old, {"message": user_message("hi", "hint-1")})
    assert reply["error"] == {
        "code": -32601, "message": f"Method not found: {old} is A2A 0.3's name; A2A 1.0 names it {new}"
    }


def test_an_unknown_method_is_named_when_it_is_safe_to_repeat(server: ServerProcess) -> None:
    named = rpc(server.agent("test-runner"), "SendMesage", {})["error"]
    assert named["code"] == -32601
    assert named["message"].startswith("Method not found: SendMesage; A2A 1.0's methods are SendMessage, ")
    for unsafe in ("<script>alert(1)</script>", "x" * 65, "a b", "é"):
        assert rpc(server.agent("test-runner"), unsafe, {})["error"] == {"code": -32601, "message": "Method not found"}


def test_a_missing_version_header_says_what_to_send(server: ServerProcess) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
    answer = httpx.post(f"{server.agent('test-runner')}/a2a/jsonrpc", json=body, timeout=10)
    assert answer.status_code == 200
    error = answer.json()["error"]
    assert (error["code"], error["message"]) == (-32009, "Protocol version not supported: send the header A2A-Version: 1.0")
    rest = httpx.get(f"{server.agent('test-runner')}/a2a/rest/tasks/x", timeout=10)
    assert rest.status_code == 400
    assert rest.json()["error"]["message"] == "Protocol version not supported: send the header A2A-Version: 1.0"


@pytest.mark.parametrize("path", ["/test-runer/a2a/jsonrpc", "/nope/", "/<b>x</b>/.well-known/agent-card.json"])
def test_a_path_no_agent_serves_answers_json_naming_the_agents(server: ServerProcess, path: str) -> None:
    answer = httpx.post(f"{server.url}{path}", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage"}, headers=A2A, timeout=10)
    assert answer.status_code == 404
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {
        "error": {
            "code": 404, "status": "NOT_FOUND", "message": "No agent or endpoint is served at this path",
            "agents": listed(server),
        }
    }
    assert "<b>" not in answer.text and "test-runer" not in answer.text


@pytest.mark.parametrize(
    ("path", "hint"),
    [
        ("/deployer/approve/some-task", "POST with the operator's bearer token"),
        ("/code-reviewer/tasks/some-task/review", 'POST {"decision": "post"|"discard"}'),
        ("/deployer/tasks/some-task/authorize", 'POST {"provider": NAME}'),
        ("/test-runner/tasks/some-task/cancel", "POST with the operator's bearer token"),
    ],
)
def test_get_on_a_post_only_link_is_405_with_what_to_send(server: ServerProcess, path: str, hint: str) -> None:
    token = {"Authorization": f"Bearer {DEPLOYER_TOKEN}"} if path.startswith("/deployer/tasks/") else {}
    answer = httpx.get(f"{server.url}{path}", headers=token, timeout=10)
    assert (answer.status_code, answer.headers["allow"]) == (405, "POST")
    assert answer.json() == {
        "error": {"code": 405, "status": "METHOD_NOT_ALLOWED", "message": f"This link takes POST, not a browser's GET: {hint}"}
    }


def test_the_root_card_names_each_agents_card_when_several_are_served(server: ServerProcess) -> None:
    answer = httpx.get(f"{server.url}/.well-known/agent-card.json", timeout=10)
    assert answer.status_code == 404
    assert answer.json()["error"]["agents"] == listed(server)
    assert "/{agent}" in answer.json()["error"]["message"]
    with pytest.raises(AgentCardResolutionError) as refused:
        asyncio.run(create_client(server.url))
    assert refused.value.status_code == 404


def test_create_client_on_the_root_of_a_server_of_one_agent() -> None:
    server = ServerProcess("memory", extra=["--agent", "test-runner"]).start()
    try:
        root = httpx.get(f"{server.url}/.well-known/agent-card.json", timeout=10).json()
        assert root == httpx.get(f"{server.agent('test-runner')}/.well-known/agent-card.json", timeout=10).json()

        async def send() -> str:
            client = await create_client(server.url)
            message = Message(message_id="root-1", role=Role.ROLE_USER, parts=[Part(text="Run the unit tests for payments-api")])
            try:
                async for response in client.send_message(SendMessageRequest(message=message)):
                    if response.HasField("task"):
                        return response.task.id
            finally:
                await client.close()
            return ""

        task_id = asyncio.run(send())
        assert rpc(server.agent("test-runner"), "GetTask", {"id": task_id})["result"]["id"] == task_id
    finally:
        server.stop()
