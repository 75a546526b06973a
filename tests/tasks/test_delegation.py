"""Delegation: the planner, as an agent principal acting for alice, creates tasks whose responsible user is alice by
naming the parent task it works on for her; a parent that is not alice's is refused, and nothing is created."""

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from a2a_bridge.tasks.delegation import ON_BEHALF_OF, PARENT_FIELD
from tests.security_support import (
    ALICE,
    BOB,
    OPS_TOKEN,
    PLANNER,
    PLANNER_TOKEN,
    OPS,
    get_task,
    message,
    normalized,
    review_message,
    secured_server,
    start,
    status_body,
    wait_state,
)
from tests.support import ServerProcess, rpc

AGENTS = ("test-runner", "code-reviewer", "deployer")
EXTENSION_FIELD = f"message.metadata.{ON_BEHALF_OF}"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = secured_server(tmp_path_factory.mktemp("delegation")).start()
    yield process
    process.stop()


def waiting_review(server: ServerProcess, headers: dict[str, str]) -> str:
    """A review that asks which base branch to use: a task that stays open, as the parent of a plan."""
    task = start(server.agent("code-reviewer"), review_message("Review this diff of payments-api"), headers)
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return f"code-reviewer/{task['id']}"


def plan(server: ServerProcess, parent: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, "-m", "a2a_bridge", "plan", "--url", server.url, "--principal-token", PLANNER_TOKEN,
        "--on-behalf-of", parent, "--approve", "--operator-token", OPS_TOKEN, "--approval-timeout", "30",
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def planners_tasks(server: ServerProcess, agent: str) -> list[dict[str, Any]]:
    return rpc(server.agent(agent), "ListTasks", {}, headers=PLANNER)["result"].get("tasks", [])


def on_behalf_of(parent: str, text: str = "Run the unit tests for payments-api at commit 4e1c2b7") -> dict[str, Any]:
    return {"message": message(text, metadata={ON_BEHALF_OF: {"parentTask": parent}})}


def field_of(reply: dict[str, Any]) -> list[str]:
    """The fields a -32602's google.rpc.BadRequest names."""
    details = reply["error"]["data"]
    return [v["field"] for d in details if d.get("@type", "").endswith("BadRequest") for v in d["fieldViolations"]]


def test_the_planner_acting_for_alice_creates_tasks_whose_responsible_user_is_alice(secured: ServerProcess) -> None:
    proc = plan(secured, waiting_review(secured, ALICE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tests: 13 passed" in proc.stdout and "deploy: TASK_STATE_COMPLETED" in proc.stdout

    for agent in AGENTS:
        tasks = planners_tasks(secured, agent)
        assert len(tasks) == 1, agent
        base, task_id = secured.agent(agent), tasks[0]["id"]
        assert status_body(base, task_id, PLANNER)["responsible_user"] == "alice"
        assert status_body(base, task_id, ALICE)["responsible_user"] == "alice"
        assert get_task(base, task_id, ALICE)["status"]["state"] == "TASK_STATE_COMPLETED"
        assert "error" in rpc(base, "GetTask", {"id": task_id}, headers=BOB)


def test_a_parent_task_that_is_not_alices_is_refused_and_nothing_is_created(secured: ServerProcess) -> None:
    bobs = waiting_review(secured, BOB)
    before = {agent: len(planners_tasks(secured, agent)) for agent in AGENTS}

    proc = plan(secured, bobs)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1
    failed = lines[lines.index("delegate run-tests to test-runner") + 1]
    assert failed.startswith("  the call failed: Invalid parameters (") and PARENT_FIELD in failed
    assert "tests: not done" in lines

    runner = secured.agent("test-runner")
    refused = rpc(runner, "SendMessage", on_behalf_of(bobs), headers=PLANNER)
    assert refused["error"]["code"] == -32602
    assert field_of(refused) == [PARENT_FIELD]
    for parent in (f"code-reviewer/{'0' * 8}-0000-4000-8000-{'0' * 12}", "no-slash", bobs.replace("code-reviewer", "deployer")):
        other = rpc(runner, "SendMessage", on_behalf_of(parent), headers=PLANNER)
        assert other["error"] == refused["error"], "a refusal must not tell whether the parent exists"
    assert {agent: len(planners_tasks(secured, agent)) for agent in AGENTS} == before


def test_a_parent_must_be_active_and_only_agent_principals_delegate(secured: ServerProcess) -> None:
    runner = secured.agent("test-runner")
    finished = start(runner, message("Run the unit tests for payments-api at commit 4e1c2b7"), ALICE)
    assert finished["status"]["state"] == "TASK_STATE_COMPLETED"
    assert field_of(rpc(runner, "SendMessage", on_behalf_of(f"test-runner/{finished['id']}"), headers=PLANNER)) == [PARENT_FIELD]

    alices = waiting_review(secured, ALICE)
    as_alice = rpc(runner, "SendMessage", on_behalf_of(alices), headers=ALICE)
    assert field_of(as_alice) == [EXTENSION_FIELD]
    plain = {"message": message("Run the unit tests for payments-api at commit 4e1c2b7")}
    without_parent = rpc(runner, "SendMessage", plain, headers=PLANNER)
    assert field_of(without_parent) == [EXTENSION_FIELD]
    malformed = {"message": message("Run the unit tests", metadata={ON_BEHALF_OF: "code-reviewer/x"})}
    assert field_of(rpc(runner, "SendMessage", malformed, headers=PLANNER)) == [PARENT_FIELD]


def test_a_task_the_planner_created_for_alice_is_a_parent_it_may_name_again(secured: ServerProcess) -> None:
    """A delegate working on a task it created for alice delegates further work under that task."""
    reviewer = secured.agent("code-reviewer")
    first = rpc(reviewer, "SendMessage", {"message": review_message(
        "Review this diff of payments-api", metadata={ON_BEHALF_OF: {"parentTask": waiting_review(secured, ALICE)}}
    )}, headers=PLANNER)["result"]["task"]
    assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    nested = rpc(secured.agent("test-runner"), "SendMessage", on_behalf_of(f"code-reviewer/{first['id']}"), headers=PLANNER)
    assert status_body(secured.agent("test-runner"), nested["result"]["task"]["id"], ALICE)["responsible_user"] == "alice"


def test_alice_answers_the_input_a_task_created_for_her_asks_for_and_bob_cannot(secured: ServerProcess) -> None:
    reviewer = secured.agent("code-reviewer")
    created = rpc(reviewer, "SendMessage", {"message": review_message(
        "Review this diff of payments-api", metadata={ON_BEHALF_OF: {"parentTask": waiting_review(secured, ALICE)}}
    )}, headers=PLANNER)["result"]["task"]
    assert created["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    answer = {"message": message("main", taskId=created["id"])}
    assert rpc(reviewer, "SendMessage", answer, headers=BOB)["error"]["code"] == -32001
    answered = rpc(reviewer, "SendMessage", {"message": message("main", taskId=created["id"])}, headers=ALICE)
    assert answered["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert httpx.get(f"{reviewer}/tasks/{created['id']}/status", headers=BOB, timeout=10).status_code == 404


@pytest.mark.parametrize("named", ["planner", "bob"])
def test_only_alice_answers_the_review_step_of_a_task_a_delegate_created_for_her(secured: ServerProcess, named: str) -> None:
    """Who answers a person's step comes from who the task is for, never from the text the delegate wrote: "ask
    planner" or "ask bob" still asks alice, and the delegate, bob and the operator get the unknown task's answer."""
    reviewer = secured.agent("code-reviewer")
    created = start(reviewer, review_message(
        f"Review this diff against main, ask {named} before posting",
        metadata={ON_BEHALF_OF: {"parentTask": waiting_review(secured, ALICE)}},
    ), PLANNER)
    task_id = created["id"]
    assert created["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    unknown = normalized(httpx.post(f"{reviewer}/tasks/no-such-task/review", json={"decision": "post"}, headers=BOB,
                                    timeout=30), "no-such-task")
    for someone_else in (PLANNER, BOB, OPS):
        refused = httpx.post(f"{reviewer}/tasks/{task_id}/review", json={"decision": "post"}, headers=someone_else,
                             timeout=30)
        assert normalized(refused, task_id) == unknown, someone_else
    assert get_task(reviewer, task_id, ALICE)["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    waiting = status_body(reviewer, task_id, ALICE)
    assert waiting["responsible_user"] == "alice"
    assert [n["kind"] for n in waiting["status"]["notifications"]] == ["review_required"]
    answered = httpx.post(f"{reviewer}/tasks/{task_id}/review", json={"decision": "post"}, headers=ALICE, timeout=30)
    assert answered.status_code == 200, answered.text
    wait_state(reviewer, task_id, ALICE, "TASK_STATE_COMPLETED")
    claim = httpx.get(f"{reviewer}/tasks/{task_id}/claim", headers=ALICE, timeout=30).json()
    assert [e["evidence"] for e in claim["events"] if e["operation"] == "resume"] == [
        {"signal": "review:post", "by": "alice"}
    ]
