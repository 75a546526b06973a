"""Who must act: the who-must-act extension on the cards, the notifications it raises (and the ones it does not), and
the endpoints that resolve each case, against a real `a2a-bridge serve` process; then next_notifications alone."""

import base64
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from a2a.types import Task, TaskState
from google.protobuf.json_format import ParseDict

from a2a_bridge.core.task_status import WHO_MUST_ACT, Notification, next_notifications
from tests.support import DEPLOYER_TOKEN, ServerProcess, rpc, wait_for

DIFF = "--- a/payments/refunds.py\n+++ b/payments/refunds.py\n@@ -40,3 +40,4 @@\n+    amount = math.floor(amount)\n"
ALICE_TOKEN = "alice_tok_who_must_act"
BOB_TOKEN = "bob_tok_who_must_act"
OPERATOR_TOKEN = "ops_wma_3f70"
DEPLOYER = {"Authorization": f"Bearer {DEPLOYER_TOKEN}"}
ALICE = {"Authorization": f"Bearer {ALICE_TOKEN}"}
BOB = {"Authorization": f"Bearer {BOB_TOKEN}"}
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
ANONYMOUS: dict[str, str] = {}
POLLS = 4
"""How many times a test rereads a status to show an outstanding notification does not move."""


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A bridge with two named users besides the deployer's client and the operator."""
    db = tmp_path_factory.mktemp("who-must-act") / "bridge.db"
    users = ["--user-token", f"{ALICE_TOKEN}=alice", "--user-token", f"{BOB_TOKEN}=bob", "--operator-token", OPERATOR_TOKEN]
    process = ServerProcess(f"sqlite:///{db}", pace=0.3, extra=users).start()
    yield process
    process.stop()


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def parse_time(text: str) -> datetime:
    """A wire time, to the millisecond that `since` carries."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def send(base: str, parts: list[dict[str, Any]], headers: dict[str, str]) -> dict[str, Any]:
    """A blocking SendMessage that starts a task; returns the task as the call left it."""
    message = {"messageId": new_id("who"), "role": "ROLE_USER", "parts": parts}
    reply = rpc(base, "SendMessage", {"message": message}, headers=headers)
    assert "error" not in reply, reply
    return reply["result"]["task"]


def deploy(bridge: ServerProcess, text: str) -> dict[str, Any]:
    return send(bridge.agent("deployer"), [{"text": text}], DEPLOYER)


def review(bridge: ServerProcess, text: str, headers: dict[str, str]) -> dict[str, Any]:
    diff = {"raw": base64.b64encode(DIFF.encode()).decode(), "mediaType": "text/x-diff"}
    return send(bridge.agent("code-reviewer"), [{"text": text}, diff], headers)


def get_task(base: str, task_id: str, headers: dict[str, str]) -> dict[str, Any]:
    reply = rpc(base, "GetTask", {"id": task_id}, headers=headers)
    assert "error" not in reply, reply
    return reply["result"]


def status_response(base: str, task_id: str, headers: dict[str, str], **params: str) -> httpx.Response:
    return httpx.get(f"{base}/tasks/{task_id}/status", headers=headers, params=params, timeout=30)


def status_of(base: str, task_id: str, headers: dict[str, str]) -> dict[str, Any]:
    response = status_response(base, task_id, headers)
    assert response.status_code == 200, response.text
    return response.json()


def answer(base: str, task_id: str, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{base}/tasks/{task_id}/{path}", json=body, headers=headers, timeout=30)


def kinds(status: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(n["kind"], n.get("provider")) for n in status["status"]["notifications"]]


def polled_steadily(base: str, task_id: str, headers: dict[str, str], expected: dict[str, Any]) -> None:
    """Several polls all show the same status object (so the same notifications with the same `since`)."""
    for _ in range(POLLS):
        assert status_of(base, task_id, headers) == expected


def changes_until_terminal(
    base: str, task_id: str, headers: dict[str, str], before: httpx.Response
) -> list[dict[str, Any]]:
    """Each status object after the one `before` answered, followed by long polls on its ETag, up to the terminal one."""
    seen: list[dict[str, Any]] = []
    etag = before.headers["etag"]
    while not seen or seen[-1]["status"]["phase"] != "terminal":
        response = status_response(base, task_id, {**headers, "If-None-Match": etag}, wait="20")
        assert response.status_code == 200, f"no change within 20 s after {seen}"
        etag = response.headers["etag"]
        seen.append(response.json())
    return seen


def assert_resolved_then_terminal(changes: list[dict[str, Any]]) -> None:
    """The notification is gone from the first status after resolution, and the task then ends completed."""
    assert changes[0]["status"]["phase"] == "processing", changes
    assert all(change["status"]["notifications"] == [] for change in changes), changes
    assert changes[-1]["status"]["terminal_reason"] == "completed"


def test_every_card_declares_the_who_must_act_extension(bridge: ServerProcess) -> None:
    for agent in ("test-runner", "code-reviewer", "deployer"):
        card = httpx.get(f"{bridge.agent(agent)}/.well-known/agent-card.json", timeout=10).json()
        (extension,) = card["capabilities"]["extensions"]
        assert extension["uri"] == WHO_MUST_ACT
        assert extension.get("required", False) is False
        assert "who must act" in extension["description"]


def test_preview_deploy_raises_one_user_auth_required_per_provider_until_signed_in(bridge: ServerProcess) -> None:
    deployer = bridge.agent("deployer")
    task = deploy(bridge, "Deploy build 2026.10.06-2 to preview")
    task_id = task["id"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    asked = task["status"]["message"]
    assert [(e["actor"], e["action"], e["provider"]) for e in asked["metadata"][WHO_MUST_ACT]] == [
        ("user", "authorize_provider", "cloud-console"),
        ("user", "authorize_provider", "cloud-console"),
        ("user", "authorize_provider", "github"),
    ]
    assert f"{deployer}/tasks/{task_id}/authorize" in asked["parts"][0]["text"]

    first = status_of(deployer, task_id, DEPLOYER)
    polled_at = datetime.now(UTC)
    assert first["responsible_user"] == "deployer-client"
    assert first["status"]["phase"] == "processing"
    # Three operations wait on two providers: one notification per provider, raised together.
    assert kinds(first) == [("user_auth_required", "cloud-console"), ("user_auth_required", "github")]
    since = first["status"]["notifications"][0]["since"]
    assert first["status"]["notifications"][1]["since"] == since
    assert parse_time(task["status"]["timestamp"]) <= parse_time(since) <= polled_at
    polled_steadily(deployer, task_id, DEPLOYER, first)

    # Only the responsible user may authorize; everyone else is told the task does not exist.
    assert answer(deployer, task_id, "authorize", {"provider": "github"}, ANONYMOUS).status_code == 401
    assert answer(deployer, task_id, "authorize", {"provider": "github"}, OPERATOR).status_code == 404
    assert answer(deployer, task_id, "authorize", {"provider": "github"}, ALICE).status_code == 404
    assert answer(deployer, task_id, "authorize", {"provider": "gitlab"}, DEPLOYER).status_code == 400
    assert answer(deployer, task_id, "authorize", None, DEPLOYER).status_code == 400
    # Nor is this an operator's approval.
    assert httpx.post(f"{deployer}/approve/{task_id}", json={}, timeout=10).status_code == 409
    polled_steadily(deployer, task_id, DEPLOYER, first)

    granted = answer(deployer, task_id, "authorize", {"provider": "github"}, DEPLOYER)
    assert granted.status_code == 200, granted.text
    assert granted.json() == {"taskId": task_id, "provider": "github", "signal": "authorized:github"}

    def github_resolved() -> dict[str, Any] | None:
        current = status_of(deployer, task_id, DEPLOYER)
        return current if kinds(current) == [("user_auth_required", "cloud-console")] else None

    second = wait_for(github_resolved, what="the github notification to go")
    # A second AUTH_REQUIRED status that keeps the cloud-console request keeps its notification and its `since`.
    assert second["status"]["notifications"][0]["since"] == since
    assert second["status"]["phase"] == "processing"
    asked_again = get_task(deployer, task_id, DEPLOYER)["status"]
    assert asked_again["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert [e["provider"] for e in asked_again["message"]["metadata"][WHO_MUST_ACT]] == ["cloud-console"] * 2
    assert f"{deployer}/tasks/{task_id}/authorize" in asked_again["message"]["parts"][0]["text"]
    assert parse_time(since) < parse_time(asked_again["timestamp"])
    assert answer(deployer, task_id, "authorize", {"provider": "github"}, DEPLOYER).status_code == 400
    polled_steadily(deployer, task_id, DEPLOYER, second)

    before = status_response(deployer, task_id, DEPLOYER)
    granted = answer(deployer, task_id, "authorize", {"provider": "cloud-console"}, DEPLOYER)
    assert granted.status_code == 200, granted.text
    assert_resolved_then_terminal(changes_until_terminal(deployer, task_id, DEPLOYER, before))
    done = get_task(deployer, task_id, DEPLOYER)
    assert done["status"]["message"]["parts"][0]["text"] == "Build 2026.10.06-2 is live on preview"
    report = next(a for a in done["artifacts"] if a["artifactId"] == "deploy-report")
    assert report["parts"][0]["data"]["environment"] == "preview"
    # Nobody must act on an ended task.
    assert answer(deployer, task_id, "authorize", {"provider": "cloud-console"}, DEPLOYER).status_code == 404


def test_staging_deploy_waits_on_an_operator_without_notification(bridge: ServerProcess) -> None:
    deployer = bridge.agent("deployer")
    task = deploy(bridge, "Deploy build 2026.10.06-3 to staging")
    task_id = task["id"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert task["status"]["message"]["metadata"] == {WHO_MUST_ACT: {"actor": "operator", "action": "approve"}}
    waiting = status_of(deployer, task_id, DEPLOYER)
    assert waiting["status"]["phase"] == "processing" and waiting["status"]["notifications"] == []
    polled_steadily(deployer, task_id, DEPLOYER, waiting)
    # The responsible user is not the one who must act here.
    assert answer(deployer, task_id, "authorize", {"provider": "cloud-console"}, DEPLOYER).status_code == 404

    before = status_response(deployer, task_id, DEPLOYER)
    assert httpx.post(f"{deployer}/approve/{task_id}", json={}, timeout=10).status_code == 200
    assert_resolved_then_terminal(changes_until_terminal(deployer, task_id, DEPLOYER, before))
    done = get_task(deployer, task_id, DEPLOYER)
    assert done["status"]["message"]["parts"][0]["text"] == "Build 2026.10.06-3 is live on staging"


def test_review_step_for_the_responsible_user_raises_review_required(bridge: ServerProcess) -> None:
    reviewer = bridge.agent("code-reviewer")
    task = review(bridge, "Review this diff against main, and ask me before posting", ALICE)
    task_id = task["id"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    question = task["status"]["message"]
    assert question["metadata"] == {WHO_MUST_ACT: {"actor": "user", "action": "review"}}
    assert question["parts"][0]["text"].startswith("Post these findings to the pull request?")
    assert f"{reviewer}/tasks/{task_id}/review" in question["parts"][0]["text"]
    assert [a["artifactId"] for a in task["artifacts"]] == ["review"]

    first = status_of(reviewer, task_id, ALICE)
    polled_at = datetime.now(UTC)
    assert first["responsible_user"] == "alice"
    assert first["status"]["phase"] == "processing"
    (notification,) = first["status"]["notifications"]
    assert set(notification) == {"kind", "since"} and notification["kind"] == "review_required"
    assert parse_time(task["status"]["timestamp"]) <= parse_time(notification["since"]) <= polled_at
    polled_steadily(reviewer, task_id, ALICE, first)

    for someone_else in (BOB, OPERATOR, ANONYMOUS):
        assert answer(reviewer, task_id, "review", {"decision": "post"}, someone_else).status_code == 404
    assert answer(reviewer, task_id, "review", {"decision": "maybe"}, ALICE).status_code == 400
    polled_steadily(reviewer, task_id, ALICE, first)

    before = status_response(reviewer, task_id, ALICE)
    decided = answer(reviewer, task_id, "review", {"decision": "post"}, ALICE)
    assert decided.status_code == 200, decided.text
    assert decided.json() == {"taskId": task_id, "decision": "post", "signal": "review:post"}
    assert_resolved_then_terminal(changes_until_terminal(reviewer, task_id, ALICE, before))
    done = get_task(reviewer, task_id, ALICE)
    assert done["status"]["message"]["parts"][0]["text"] == "2 findings posted to the pull request"


def test_a_review_step_that_names_another_user_is_the_responsible_users(bridge: ServerProcess) -> None:
    """"ask bob" in alice's text does not let bob decide alice's task: alice is notified and decides."""
    reviewer = bridge.agent("code-reviewer")
    task = review(bridge, "Review this diff against main, ask bob before posting", ALICE)
    task_id = task["id"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert task["status"]["message"]["metadata"] == {WHO_MUST_ACT: {"actor": "user", "action": "review"}}
    waiting = status_of(reviewer, task_id, ALICE)
    assert waiting["responsible_user"] == "alice"
    assert kinds(waiting) == [("review_required", None)]

    for not_alice in (BOB, OPERATOR, ANONYMOUS):
        assert answer(reviewer, task_id, "review", {"decision": "discard"}, not_alice).status_code == 404

    before = status_response(reviewer, task_id, ALICE)
    decided = answer(reviewer, task_id, "review", {"decision": "discard"}, ALICE)
    assert decided.status_code == 200, decided.text
    changes = changes_until_terminal(reviewer, task_id, ALICE, before)
    assert all(change["status"]["notifications"] == [] for change in changes)
    assert changes[-1]["status"]["terminal_reason"] == "completed"
    done = get_task(reviewer, task_id, ALICE)
    assert done["status"]["message"]["parts"][0]["text"] == "2 findings, not posted to the pull request"


def test_anonymous_task_is_decided_by_anonymous_callers_only(bridge: ServerProcess) -> None:
    reviewer = bridge.agent("code-reviewer")
    mine = review(bridge, "Review this diff against main, ask me before posting", ANONYMOUS)
    theirs = review(bridge, "Review this diff against main, ask bob before posting", ANONYMOUS)
    for task in (mine, theirs):
        waiting = status_of(reviewer, task["id"], ANONYMOUS)
        assert waiting["responsible_user"] == "anonymous"
        assert kinds(waiting) == [("review_required", None)]

    # Every anonymous caller shares an anonymous task, so any of them decides; a named user, the one the text names
    # included, is told the task does not exist.
    for task in (mine, theirs):
        for named in (ALICE, BOB):
            assert answer(reviewer, task["id"], "review", {"decision": "discard"}, named).status_code == 404
        assert answer(reviewer, task["id"], "review", {"decision": "discard"}, ANONYMOUS).status_code == 200

    def both_ended() -> bool:
        return all(
            status_of(reviewer, task["id"], ANONYMOUS)["status"]["phase"] == "terminal" for task in (mine, theirs)
        )

    wait_for(both_ended, what="both reviews to end")


def test_answer_endpoints_are_served_only_where_the_agent_declares_them(bridge: ServerProcess) -> None:
    task = review(bridge, "Review this diff against main, ask me before posting", ANONYMOUS)
    reviewer = bridge.agent("code-reviewer")
    assert answer(reviewer, task["id"], "authorize", {"provider": "cloud-console"}, ANONYMOUS).status_code == 404
    assert answer(bridge.agent("test-runner"), task["id"], "review", {"decision": "post"}, ANONYMOUS).status_code == 404
    assert answer(bridge.agent("deployer"), task["id"], "review", {"decision": "post"}, DEPLOYER).status_code == 404
    assert answer(reviewer, "no-such-task", "review", {"decision": "post"}, ANONYMOUS).status_code == 404
    assert answer(reviewer, task["id"], "review", {"decision": "discard"}, ANONYMOUS).status_code == 200


RESPONSIBLE = "alice"
T0 = datetime(2026, 10, 6, 9, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=5)


def task_in(state: "TaskState.ValueType", who_must_act: Any = None, message: bool = True) -> Task:
    """A task in `state` whose status message carries `who_must_act` under the extension's key (if given)."""
    task = Task(id="t", context_id="c")
    task.status.state = state
    if message:
        task.status.message.message_id = "m"
        task.status.message.parts.add(text="waiting")
        if who_must_act is not None:
            ParseDict({WHO_MUST_ACT: who_must_act}, task.status.message.metadata)
    return task


def waiting_on(who_must_act: Any) -> Task:
    return task_in(TaskState.TASK_STATE_AUTH_REQUIRED, who_must_act)


def sign_in(provider: str, **extra: str) -> dict[str, str]:
    return {"actor": "user", "action": "authorize_provider", "provider": provider, **extra}


def pairs(notifications: list[Notification]) -> list[tuple[str, str | None]]:
    return [(n.kind, n.provider) for n in notifications]


@pytest.mark.parametrize(
    "task",
    [
        task_in(TaskState.TASK_STATE_WORKING, sign_in("cloud-console")),
        task_in(TaskState.TASK_STATE_INPUT_REQUIRED, {"actor": "user", "action": "review"}),
        task_in(TaskState.TASK_STATE_AUTH_REQUIRED, message=False),
        waiting_on(None),
        waiting_on({"actor": "operator", "action": "approve"}),
        waiting_on({"actor": "operator", "action": "reconcile"}),
        waiting_on({"actor": "host", "action": "configure_provider", "provider": "cloud-console"}),
        waiting_on({"actor": "user", "action": "authorize_provider"}),
        waiting_on({"actor": "user", "action": "pay_invoice"}),
        waiting_on(["not an object", {"action": "review"}, {"actor": "user"}, {"actor": 1, "action": "review"}]),
        waiting_on("user must review"),
    ],
    ids=[
        "working",
        "input-required",
        "no-message",
        "no-key",
        "operator-approves",
        "operator-reconciles",
        "host-configuration",
        "sign-in-without-provider",
        "unknown-action",
        "malformed-entries",
        "not-an-object",
    ],
)
def test_nothing_is_raised_unless_the_responsible_user_must_act(task: Task) -> None:
    assert next_notifications([], task, RESPONSIBLE, T0) == []


def test_one_notification_per_provider_however_many_operations_wait_on_it() -> None:
    task = waiting_on([sign_in("cloud-console", operation="upload"), sign_in("github"), sign_in("cloud-console")])
    assert pairs(next_notifications([], task, RESPONSIBLE, T0)) == [
        ("user_auth_required", "cloud-console"),
        ("user_auth_required", "github"),
    ]


def test_a_single_object_and_a_review_addressed_by_name_to_the_responsible_user() -> None:
    assert pairs(next_notifications([], waiting_on(sign_in("cloud-console")), RESPONSIBLE, T0)) == [
        ("user_auth_required", "cloud-console")
    ]
    named = waiting_on({"actor": "user", "action": "review", "user": RESPONSIBLE})
    (raised,) = next_notifications([], named, RESPONSIBLE, T0)
    assert (raised.kind, raised.provider, raised.since) == ("review_required", None, T0)
    assert raised.as_json() == {"kind": "review_required", "since": "2026-10-06T09:00:00.000Z"}


def test_a_user_step_naming_another_user_is_still_the_responsible_users() -> None:
    """Who must act comes from who the task is for, never from a name the requester's text put in the entry."""
    task = waiting_on([{"actor": "user", "action": "review", "user": "bob"}, sign_in("cloud-console", user="bob")])
    assert pairs(next_notifications([], task, RESPONSIBLE, T0)) == [
        ("review_required", None),
        ("user_auth_required", "cloud-console"),
    ]


def test_the_anonymous_responsible_user_is_asked_when_no_user_is_named() -> None:
    task = waiting_on({"actor": "user", "action": "review"})
    assert pairs(next_notifications([], task, "anonymous", T0)) == [("review_required", None)]


def test_an_outstanding_notification_keeps_its_since_and_a_new_one_starts_now() -> None:
    first = next_notifications([], waiting_on(sign_in("cloud-console")), RESPONSIBLE, T0)
    later = waiting_on([{"actor": "user", "action": "review"}, sign_in("cloud-console"), sign_in("cloud-console")])
    kept = next_notifications(first, later, RESPONSIBLE, T1)
    assert [(n.kind, n.provider, n.since) for n in kept] == [
        ("user_auth_required", "cloud-console", T0),
        ("review_required", None, T1),
    ]
    assert next_notifications(kept, later, RESPONSIBLE, T1 + timedelta(seconds=5)) == kept


def test_resolved_notifications_go_and_a_new_raise_starts_a_new_since() -> None:
    both = next_notifications([], waiting_on([sign_in("cloud-console"), sign_in("github")]), RESPONSIBLE, T0)
    left = next_notifications(both, waiting_on(sign_in("cloud-console")), RESPONSIBLE, T1)
    assert [(n.provider, n.since) for n in left] == [("cloud-console", T0)]
    working = task_in(TaskState.TASK_STATE_WORKING)
    assert next_notifications(left, working, RESPONSIBLE, T1) == []
    raised_again = next_notifications([], waiting_on(sign_in("cloud-console")), RESPONSIBLE, T1)
    assert [(n.provider, n.since) for n in raised_again] == [("cloud-console", T1)]
    assert next_notifications(left, task_in(TaskState.TASK_STATE_COMPLETED), RESPONSIBLE, T1) == []


def test_notifications_are_ordered_by_since() -> None:
    older = [Notification("user_auth_required", T0, "github")]
    task = waiting_on([{"actor": "user", "action": "review"}, sign_in("github")])
    assert [(n.kind, n.since) for n in next_notifications(older, task, RESPONSIBLE, T1)] == [
        ("user_auth_required", T0),
        ("review_required", T1),
    ]
