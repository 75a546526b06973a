"""The deployer's bearer gate on the combined server, where each agent is mounted under /{name}."""

import httpx
import pytest

from tests.support import A2A, DEPLOYER_TOKEN, ServerProcess

A2A_PATHS = [
    ("POST", "/a2a/jsonrpc"),
    ("POST", "/a2a/rest/message:send"),
    ("GET", "/a2a/rest/tasks"),
    ("POST", "/t1/a2a/rest/message:send"),
    ("GET", "/t1/a2a/rest/tasks"),
]


@pytest.mark.parametrize(("method", "path"), A2A_PATHS)
def test_a2a_paths_refuse_a_caller_without_a_token(server: ServerProcess, method: str, path: str) -> None:
    response = httpx.request(method, server.agent("deployer") + path, headers=A2A, json={}, timeout=10)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="deployer"'


@pytest.mark.parametrize(("method", "path"), A2A_PATHS)
def test_a2a_paths_refuse_an_unknown_token(server: ServerProcess, method: str, path: str) -> None:
    headers = {**A2A, "Authorization": "Bearer not-the-token"}
    assert httpx.request(method, server.agent("deployer") + path, headers=headers, json={}, timeout=10).status_code == 401


def test_the_token_opens_the_jsonrpc_binding(server: ServerProcess) -> None:
    headers = {**A2A, "Authorization": f"Bearer {DEPLOYER_TOKEN}"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "no-such-task"}}
    reply = httpx.post(server.agent("deployer") + "/a2a/jsonrpc", headers=headers, json=body, timeout=10).json()
    assert reply["error"]["code"] == -32001


def test_card_and_operator_approval_stay_outside_the_gate(server: ServerProcess) -> None:
    assert httpx.get(server.agent("deployer") + "/.well-known/agent-card.json", timeout=10).status_code == 200
    response = httpx.post(server.agent("deployer") + "/approve/no-such-task", timeout=10)
    assert response.status_code == 404
    assert response.json()["error"] == {"code": 404, "status": "NOT_FOUND", "message": "Task not found", "taskId": "no-such-task"}
