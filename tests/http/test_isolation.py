"""Isolation: another principal's task answers exactly as a task that does not exist, on every A2A method of both
bindings and on every bridge endpoint, and stays as it was; under --require-auth a caller without a known token
gets 401 everywhere but the card."""

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.security_support import (
    ALICE,
    BOB,
    OPS,
    PLANNER,
    get_task,
    jsonrpc,
    message,
    normalized,
    rest,
    review_message,
    secured_server,
    start,
    status_body,
    wait_state,
)
from tests.support import A2A, ServerProcess, rpc, wait_for

Call = Callable[[str, str, dict[str, str]], httpx.Response]
"""(agent base URL, task id, caller's headers) -> the answer."""
HOOK = "http://127.0.0.1:9/b-hook"
INTRUDERS = {"bob (another user)": BOB, "planner (an agent acting for alice)": PLANNER}


@dataclass(frozen=True)
class Case:
    name: str
    agent: str
    task: str
    """Which of alice's tasks the call is aimed at (a key of the `alices` fixture)."""
    call: Call


def follow_up(task_id: str) -> dict[str, Any]:
    return {"message": message("main", taskId=task_id)}


def rpc_call(method: str, params: Callable[[str], dict[str, Any]]) -> Call:
    return lambda base, task_id, headers: jsonrpc(base, method, params(task_id), headers)


def rest_call(verb: str, path: str, body: Callable[[str], Any] | None = None) -> Call:
    return lambda base, task_id, headers: rest(
        base, verb, path.format(id=task_id, config=CONFIG_ID), headers, body(task_id) if body else None
    )


def bridge_call(verb: str, path: str, body: Any = None, extra: dict[str, str] | None = None) -> Call:
    def call(base: str, task_id: str, headers: dict[str, str]) -> httpx.Response:
        sent = {**headers, **(extra or {})}
        with httpx.stream(verb, f"{base}{path.format(id=task_id)}", headers=sent, json=body, timeout=30) as response:
            response.read()
        return response

    return call


CONFIG_ID = "alice-hook"
"""The id of the push config alice sets on her finished test-runner task."""

A2A_CASES = [
    Case("JSON-RPC SendMessage (follow-up)", "code-reviewer", "asking", rpc_call("SendMessage", follow_up)),
    Case("JSON-RPC SendStreamingMessage (follow-up)", "code-reviewer", "asking", rpc_call("SendStreamingMessage", follow_up)),
    Case("JSON-RPC GetTask", "test-runner", "done", rpc_call("GetTask", lambda t: {"id": t})),
    Case("JSON-RPC GetTask (historyLength)", "test-runner", "done", rpc_call("GetTask", lambda t: {"id": t, "historyLength": 1})),
    Case("JSON-RPC CancelTask", "code-reviewer", "asking", rpc_call("CancelTask", lambda t: {"id": t})),
    Case("JSON-RPC SubscribeToTask", "code-reviewer", "asking", rpc_call("SubscribeToTask", lambda t: {"id": t})),
    Case(
        "JSON-RPC CreateTaskPushNotificationConfig", "test-runner", "done",
        rpc_call("CreateTaskPushNotificationConfig", lambda t: {"taskId": t, "url": HOOK}),
    ),
    Case(
        "JSON-RPC GetTaskPushNotificationConfig", "test-runner", "done",
        rpc_call("GetTaskPushNotificationConfig", lambda t: {"taskId": t, "id": CONFIG_ID}),
    ),
    Case(
        "JSON-RPC ListTaskPushNotificationConfigs", "test-runner", "done",
        rpc_call("ListTaskPushNotificationConfigs", lambda t: {"taskId": t}),
    ),
    Case(
        "JSON-RPC DeleteTaskPushNotificationConfig", "test-runner", "done",
        rpc_call("DeleteTaskPushNotificationConfig", lambda t: {"taskId": t, "id": CONFIG_ID}),
    ),
    Case("REST message:send (follow-up)", "code-reviewer", "asking", rest_call("POST", "/message:send", follow_up)),
    Case("REST message:stream (follow-up)", "code-reviewer", "asking", rest_call("POST", "/message:stream", follow_up)),
    Case("REST GET task", "test-runner", "done", rest_call("GET", "/tasks/{id}")),
    Case("REST GET task (historyLength)", "test-runner", "done", rest_call("GET", "/tasks/{id}?historyLength=1")),
    Case("REST cancel", "code-reviewer", "asking", rest_call("POST", "/tasks/{id}:cancel")),
    Case("REST subscribe (GET)", "code-reviewer", "asking", rest_call("GET", "/tasks/{id}:subscribe")),
    Case("REST subscribe (POST)", "code-reviewer", "asking", rest_call("POST", "/tasks/{id}:subscribe")),
    Case(
        "REST create push config", "test-runner", "done",
        rest_call("POST", "/tasks/{id}/pushNotificationConfigs", lambda t: {"url": HOOK}),
    ),
    Case("REST get push config", "test-runner", "done", rest_call("GET", "/tasks/{id}/pushNotificationConfigs/{config}")),
    Case("REST list push configs", "test-runner", "done", rest_call("GET", "/tasks/{id}/pushNotificationConfigs")),
    Case("REST delete push config", "test-runner", "done", rest_call("DELETE", "/tasks/{id}/pushNotificationConfigs/{config}")),
]
BRIDGE_CASES = [
    Case("status", "test-runner", "done", bridge_call("GET", "/tasks/{id}/status")),
    Case("status (unchanged poll)", "test-runner", "done", bridge_call("GET", "/tasks/{id}/status", extra={"If-None-Match": "*"})),
    Case("status (long poll)", "code-reviewer", "asking", bridge_call("GET", "/tasks/{id}/status?wait=1")),
    Case("status stream", "code-reviewer", "asking", bridge_call("GET", "/tasks/{id}/status/stream")),
    Case("claim", "test-runner", "done", bridge_call("GET", "/tasks/{id}/claim")),
    Case(
        "reconcile", "deployer", "staging",
        bridge_call("POST", "/tasks/{id}/reconcile", {"outcome": "completed", "evidence": {"note": "done by hand"}}),
    ),
    Case("operator cancel", "code-reviewer", "asking", bridge_call("POST", "/tasks/{id}/cancel")),
    Case("approve", "deployer", "staging", bridge_call("POST", "/approve/{id}", {})),
    Case("authorize", "deployer", "preview", bridge_call("POST", "/tasks/{id}/authorize", {"provider": "cloud-console"})),
    Case("review", "code-reviewer", "review", bridge_call("POST", "/tasks/{id}/review", {"decision": "post"})),
]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = secured_server(tmp_path_factory.mktemp("isolation"), pace=0.4).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def alices(secured: ServerProcess) -> dict[str, str]:
    """alice's tasks, one in each state a method or endpoint acts on: done (with a push config), asking for input,
    waiting for her review, for an operator's approval, and for her sign-in."""
    runner, reviewer, deployer = (secured.agent(name) for name in ("test-runner", "code-reviewer", "deployer"))
    done = start(runner, message("Run the unit tests for payments-api at commit 9f3c2e1"), ALICE)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    created = rpc(runner, "CreateTaskPushNotificationConfig", {"taskId": done["id"], "id": CONFIG_ID, "url": HOOK}, headers=ALICE)
    assert created["result"]["id"] == CONFIG_ID, created
    tasks = {
        "done": done,
        "asking": start(reviewer, review_message("Review this diff of payments-api"), ALICE),
        "review": start(reviewer, review_message("Review this diff against main, ask me before posting"), ALICE),
        "staging": start(deployer, message("Deploy build 2026.10.06-1 to staging"), ALICE),
        "preview": start(deployer, message("Deploy build 2026.10.06-2 to preview"), ALICE),
    }
    assert tasks["asking"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    for name in ("review", "staging", "preview"):
        assert tasks[name]["status"]["state"] == "TASK_STATE_AUTH_REQUIRED", name
    return {name: task["id"] for name, task in tasks.items()}


def as_alice_sees_it(base: str, task_id: str) -> dict[str, Any]:
    """Everything alice can read of her task: the task, its status view (with the revision) and its push configs."""
    configs = rpc(base, "ListTaskPushNotificationConfigs", {"taskId": task_id}, headers=ALICE)
    return {
        "task": get_task(base, task_id, ALICE),
        "status": status_body(base, task_id, ALICE),
        "configs": configs.get("result", configs.get("error", {}).get("code")),
    }


@pytest.mark.parametrize("intruder", INTRUDERS.values(), ids=INTRUDERS.keys())
@pytest.mark.parametrize("case", A2A_CASES + BRIDGE_CASES, ids=lambda case: case.name)
def test_another_principals_task_answers_as_a_missing_task_and_stays_unchanged(
    secured: ServerProcess, alices: dict[str, str], case: Case, intruder: dict[str, str]
) -> None:
    base = secured.agent(case.agent)
    task_id = alices[case.task]
    before = as_alice_sees_it(base, task_id)
    missing = str(uuid.uuid4())

    theirs = normalized(case.call(base, task_id, intruder), task_id)
    absent = normalized(case.call(base, missing, intruder), missing)

    assert theirs == absent
    assert theirs["status"] in (200, 404), theirs
    assert as_alice_sees_it(base, task_id) == before


@pytest.mark.parametrize("intruder", INTRUDERS.values(), ids=INTRUDERS.keys())
def test_list_tasks_shows_only_the_callers_own_tasks(
    secured: ServerProcess, alices: dict[str, str], intruder: dict[str, str]
) -> None:
    reviewer = secured.agent("code-reviewer")
    context_id = get_task(reviewer, alices["asking"], ALICE)["contextId"]
    own = rpc(reviewer, "ListTasks", {}, headers=ALICE)["result"]["tasks"]
    assert alices["asking"] in {task["id"] for task in own}

    listed = rpc(reviewer, "ListTasks", {}, headers=intruder)["result"]
    assert not {task["id"] for task in listed.get("tasks", [])} & set(alices.values())
    for binding in ("jsonrpc", "rest"):
        theirs = list_by_context(reviewer, context_id, intruder, binding)
        other = str(uuid.uuid4())
        assert normalized(theirs, context_id) == normalized(list_by_context(reviewer, other, intruder, binding), other)


def list_by_context(base: str, context_id: str, headers: dict[str, str], binding: str) -> httpx.Response:
    if binding == "rest":
        return rest(base, "GET", f"/tasks?contextId={context_id}", headers)
    return jsonrpc(base, "ListTasks", {"contextId": context_id}, headers)


RUNNING_CASES = [
    Case("JSON-RPC SubscribeToTask", "test-runner", "running", rpc_call("SubscribeToTask", lambda t: {"id": t})),
    Case("JSON-RPC CancelTask", "test-runner", "running", rpc_call("CancelTask", lambda t: {"id": t})),
    Case("REST subscribe", "test-runner", "running", rest_call("GET", "/tasks/{id}:subscribe")),
    Case("REST cancel", "test-runner", "running", rest_call("POST", "/tasks/{id}:cancel")),
    Case("JSON-RPC SendMessage (follow-up)", "test-runner", "running", rpc_call("SendMessage", follow_up)),
]


def test_a_task_running_now_cannot_be_subscribed_to_or_canceled_by_another_principal(secured: ServerProcess) -> None:
    """a2a-python#1159: the SDK checked the owner only for tasks it had to load, so a running task was open to all."""
    runner = secured.agent("test-runner")
    task = start(runner, message("Run the full suite for payments-api at commit 4e1c2b7"), ALICE, immediately=True)
    running = wait_state(runner, task["id"], ALICE, "TASK_STATE_WORKING")
    for case in RUNNING_CASES:
        for intruder in INTRUDERS.values():
            missing = str(uuid.uuid4())
            theirs = normalized(case.call(runner, task["id"], intruder), task["id"])
            assert theirs == normalized(case.call(runner, missing, intruder), missing), case.name
            assert get_task(runner, task["id"], ALICE)["status"]["state"] == "TASK_STATE_WORKING", case.name
    done = wait_state(runner, task["id"], ALICE, "TASK_STATE_COMPLETED", timeout=60)
    assert [m["messageId"] for m in done["history"] if m["role"] == "ROLE_USER"] == [running["history"][0]["messageId"]]
    claim = httpx.get(f"{runner}/tasks/{task['id']}/claim", headers=ALICE, timeout=10).json()
    assert "request_cancel" not in [event["operation"] for event in claim["events"]]


def test_alice_herself_reaches_every_method_the_matrix_refuses(secured: ServerProcess, alices: dict[str, str]) -> None:
    """The matrix's answers are refusals of the caller, not of the request: the owner gets through."""
    runner = secured.agent("test-runner")
    assert rpc_call("GetTask", lambda t: {"id": t})(runner, alices["done"], ALICE).json()["result"]["id"] == alices["done"]
    listed = rest_call("GET", "/tasks/{id}/pushNotificationConfigs")(runner, alices["done"], ALICE).json()
    assert [config["id"] for config in listed["configs"]] == [CONFIG_ID]
    assert bridge_call("GET", "/tasks/{id}/claim")(runner, alices["done"], ALICE).status_code == 200


UNAUTHENTICATED_PATHS = [
    ("test-runner", "POST", "/a2a/jsonrpc"),
    ("test-runner", "POST", "/a2a/rest/message:send"),
    ("test-runner", "POST", "/a2a/rest/message:stream"),
    ("test-runner", "GET", "/a2a/rest/tasks"),
    ("test-runner", "GET", "/a2a/rest/tasks/{id}"),
    ("test-runner", "POST", "/a2a/rest/tasks/{id}:cancel"),
    ("test-runner", "GET", "/a2a/rest/tasks/{id}:subscribe"),
    ("test-runner", "POST", "/a2a/rest/tasks/{id}/pushNotificationConfigs"),
    ("test-runner", "GET", "/a2a/rest/tasks/{id}/pushNotificationConfigs"),
    ("test-runner", "GET", "/a2a/rest/tasks/{id}/pushNotificationConfigs/c1"),
    ("test-runner", "DELETE", "/a2a/rest/tasks/{id}/pushNotificationConfigs/c1"),
    ("test-runner", "GET", "/a2a/rest/extendedAgentCard"),
    ("test-runner", "GET", "/t1/a2a/rest/tasks"),
    ("code-reviewer", "POST", "/a2a/jsonrpc"),
    ("code-reviewer", "GET", "/tasks/{id}/status"),
    ("code-reviewer", "GET", "/tasks/{id}/status/stream"),
    ("code-reviewer", "GET", "/tasks/{id}/claim"),
    ("code-reviewer", "POST", "/tasks/{id}/reconcile"),
    ("code-reviewer", "POST", "/tasks/{id}/review"),
    ("deployer", "POST", "/a2a/jsonrpc"),
    ("deployer", "POST", "/approve/{id}"),
    ("deployer", "POST", "/tasks/{id}/authorize"),
]


@pytest.mark.parametrize(("agent", "verb", "path"), UNAUTHENTICATED_PATHS)
@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic YWxpY2U6cHc="}],
    ids=["no token", "unknown token", "not bearer"],
)
def test_under_require_auth_a_caller_without_a_known_token_gets_401(
    secured: ServerProcess, alices: dict[str, str], agent: str, verb: str, path: str, headers: dict[str, str]
) -> None:
    url = secured.agent(agent) + path.format(id=alices["asking"])
    response = httpx.request(verb, url, headers={**A2A, **headers}, json={}, timeout=10)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == f'Bearer realm="{agent}"'


def test_under_require_auth_cards_stay_public_and_the_kit_demo_tokens_are_not_accepted(secured: ServerProcess) -> None:
    for agent in ("test-runner", "code-reviewer", "deployer"):
        assert httpx.get(secured.agent(agent) + "/.well-known/agent-card.json", timeout=10).status_code == 200
    for token in ("dpl_test_7c1e4b", "ops_demo_5b9e"):
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
        headers = {**A2A, "Authorization": f"Bearer {token}"}
        assert httpx.post(secured.agent("deployer") + "/a2a/jsonrpc", json=body, headers=headers, timeout=10).status_code == 401


def test_an_operator_cancels_any_task_and_the_user_cancels_their_own(secured: ServerProcess) -> None:
    reviewer = secured.agent("code-reviewer")
    theirs = start(reviewer, review_message("Review this diff of payments-api"), BOB)
    canceled = rpc(reviewer, "CancelTask", {"id": theirs["id"]}, headers=OPS)
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    own = start(reviewer, review_message("Review this diff of payments-api"), BOB)
    assert rpc(reviewer, "CancelTask", {"id": own["id"]}, headers=BOB)["result"]["status"]["state"] == "TASK_STATE_CANCELED"

    def claim_events() -> list[dict[str, Any]] | None:
        response = httpx.get(f"{reviewer}/tasks/{theirs['id']}/claim", headers=BOB, timeout=10)
        return response.json()["events"] if response.status_code == 200 else None

    events = wait_for(claim_events, what="the claim view")
    assert {"requested_by": "ops"} in [event["evidence"] for event in events if event["operation"] == "request_cancel"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The default demo (anonymous callers allowed) with one named user."""
    db = tmp_path_factory.mktemp("isolation-demo") / "bridge.db"
    process = ServerProcess(f"sqlite:///{db}", extra=["--user-token", "usr_alice_5f1c=alice"]).start()
    yield process
    process.stop()


DEMO_CASES = [
    Case("JSON-RPC GetTask", "code-reviewer", "", rpc_call("GetTask", lambda t: {"id": t})),
    Case("JSON-RPC SendMessage (follow-up)", "code-reviewer", "", rpc_call("SendMessage", follow_up)),
    Case("JSON-RPC SubscribeToTask", "code-reviewer", "", rpc_call("SubscribeToTask", lambda t: {"id": t})),
    Case("REST cancel", "code-reviewer", "", rest_call("POST", "/tasks/{id}:cancel")),
    Case("status", "code-reviewer", "", bridge_call("GET", "/tasks/{id}/status")),
    Case("review", "code-reviewer", "", bridge_call("POST", "/tasks/{id}/review", {"decision": "post"})),
]


@pytest.mark.parametrize("case", DEMO_CASES, ids=lambda case: case.name)
def test_in_the_default_demo_anonymous_callers_and_named_users_do_not_see_each_others_tasks(
    demo: ServerProcess, case: Case
) -> None:
    reviewer = demo.agent("code-reviewer")
    text = "Review this diff against main, ask me before posting"
    tasks = {"alice": start(reviewer, review_message(text), ALICE), "anonymous": start(reviewer, review_message(text), {})}
    for owner, intruder in (("alice", {}), ("anonymous", ALICE)):
        task_id = tasks[owner]["id"]
        headers = ALICE if owner == "alice" else {}
        before = get_task(reviewer, task_id, headers)
        missing = str(uuid.uuid4())
        theirs = normalized(case.call(reviewer, task_id, intruder), task_id)
        assert theirs == normalized(case.call(reviewer, missing, intruder), missing), owner
        assert get_task(reviewer, task_id, headers) == before
