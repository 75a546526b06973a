import httpx

from tests.support import ServerProcess, rpc, user_message


def test_index_lists_the_three_agents(server: ServerProcess) -> None:
    body = httpx.get(server.url + "/").json()
    assert [a["name"] for a in body["agents"]] == ["test-runner", "code-reviewer", "deployer"]
    for agent in body["agents"]:
        assert httpx.get(agent["card"]).json()["name"] == agent["name"]


def test_blocking_send_completes(server: ServerProcess) -> None:
    reply = rpc(server.agent("test-runner"), "SendMessage",
                {"message": user_message("Run the unit tests for payments-api at commit 9f3c2e1", "smoke-1")})
    task = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["status"]["message"]["parts"][0]["text"] == "1 failed, 11 passed"


def test_health_and_readiness_answer_once_started(server: ServerProcess) -> None:
    health = httpx.get(f"{server.url}/healthz", timeout=10)
    ready = httpx.get(f"{server.url}/readyz", timeout=10)
    assert (health.status_code, health.json()) == (200, {"status": "up"})
    assert ready.status_code == 200 and ready.json()["ready"] is True
