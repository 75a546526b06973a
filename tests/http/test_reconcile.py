"""The operator's reconcile endpoint over the wire (every outcome, who may call it, what it refuses) and the claim view
of tasks as their turns run."""

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.claim_support import (
    DEPLOYER,
    FULL_SUITE,
    OPERATOR,
    UNIT_TESTS,
    RECONCILE_TEXT,
    approve,
    claim_view,
    get_task,
    operations,
    parse_iso,
    reconcile,
    review_message,
    rollouts,
    rolling_out,
    start,
    start_deploys,
    status_text,
    stored_claim_view,
    wait_state,
)
from tests.support import ServerProcess, rpc, user_message, wait_for

PACE = 3.0
"""Seconds of each deployer step: the rollout the crash interrupts lasts this long."""
MID_ROLLOUT = 6
EVIDENCE = {"note": "checked staging", "checked_by": "ops on call"}


@dataclass
class Crashed:
    """A bridge restarted after a crash that left deploys mid-rollout (in needs_reconciliation) and some waiting."""

    server: ServerProcess
    ledger: Path
    interrupted: list[str]
    waiting: list[str]

    def take(self) -> str:
        """A deploy in needs_reconciliation that no other test uses."""
        return self.interrupted.pop()


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crashed]:
    directory = tmp_path_factory.mktemp("reconcile")
    ledger = directory / "deploys.jsonl"
    server = ServerProcess(f"sqlite:///{directory / 'b.db'}", pace=PACE, extra=["--deploy-ledger", str(ledger)]).start()
    try:
        interrupted = start_deploys(server, "reconcile-deploy", MID_ROLLOUT)
        waiting = start_deploys(server, "reconcile-waiting", 2)
        approved_at = time.monotonic()
        for task_id in interrupted:
            approve(server, task_id)
        for task_id in interrupted:
            wait_for(lambda t=task_id: rolling_out(server, t), timeout=PACE, what="a rollout to start")
        assert time.monotonic() - approved_at < PACE, "the rollouts may have ended before the crash"
        server.kill()
        assert not rollouts(ledger), "a rollout finished before the crash"
        server.start()
        yield Crashed(server, ledger, interrupted, waiting)
    finally:
        server.stop()


def test_interrupted_deploys_wait_for_an_operator(crashed: Crashed) -> None:
    for task_id in crashed.interrupted:
        view = claim_view(crashed.server, "deployer", task_id)
        assert view["state"] == "needs_reconciliation"
        assert operations(view)[-1] == "invalidate"
        assert view["lease_until"] is None
        task = get_task(crashed.server, "deployer", task_id)
        assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
        assert status_text(task) == RECONCILE_TEXT


def test_completed_ends_the_task_without_running_it(crashed: Crashed) -> None:
    task_id = crashed.take()
    response = reconcile(crashed.server, "deployer", task_id, {"outcome": "completed", "evidence": EVIDENCE})
    assert response.status_code == 200, response.text
    view = response.json()
    assert view["state"] == "completed"
    assert view["events"][-1]["operation"] == "reconcile_completed"
    assert view["events"][-1]["evidence"] == EVIDENCE
    task = get_task(crashed.server, "deployer", task_id)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(task) == "Reconciled by an operator: checked staging"
    assert rollouts(crashed.ledger)[task_id] == 0


def test_cancelled_needs_a_recorded_cancellation(crashed: Crashed) -> None:
    task_id = crashed.take()
    refused = reconcile(crashed.server, "deployer", task_id, {"outcome": "cancelled", "evidence": EVIDENCE})
    assert refused.status_code == 409
    assert refused.json()["error"]["reason"] == "no_cancellation"

    answer = rpc(crashed.server.agent("deployer"), "CancelTask", {"id": task_id}, headers=DEPLOYER)
    assert "result" in answer, answer
    view = claim_view(crashed.server, "deployer", task_id)
    assert view["cancellation_requested"] is True
    assert view["state"] == "needs_reconciliation"
    assert view["events"][-1]["operation"] == "request_cancel"

    response = reconcile(crashed.server, "deployer", task_id, {"outcome": "cancelled", "evidence": EVIDENCE})
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "cancelled"
    assert get_task(crashed.server, "deployer", task_id)["status"]["state"] == "TASK_STATE_CANCELED"
    assert rollouts(crashed.ledger)[task_id] == 0


def test_continue_runs_the_work_again_under_a_new_generation(crashed: Crashed) -> None:
    task_id = crashed.take()
    fenced = claim_view(crashed.server, "deployer", task_id)["events"][-1]
    assert (fenced["operation"], fenced["claim_generation"]) == ("invalidate", 2)
    response = reconcile(crashed.server, "deployer", task_id, {"outcome": "continue", "evidence": EVIDENCE})
    assert response.status_code == 200, response.text
    done = wait_state(crashed.server, "deployer", task_id, "TASK_STATE_COMPLETED")
    assert status_text(done).endswith("is live on staging")
    view = stored_claim_view(crashed.server, "deployer", task_id)
    continued = [e for e in view["events"] if e["operation"] == "reconcile_continue"]
    assert len(continued) == 1
    assert continued[0]["evidence"] == EVIDENCE
    assert continued[0]["claim_generation"] == view["claim_generation"] == 3
    assert view["session_generation"] > fenced["evidence"]["session"]
    assert view["state"] == "completed"
    assert rollouts(crashed.ledger)[task_id] == 1


def test_continue_is_refused_once_a_cancellation_is_recorded(crashed: Crashed) -> None:
    task_id = crashed.take()
    rpc(crashed.server.agent("deployer"), "CancelTask", {"id": task_id}, headers=DEPLOYER)
    refused = reconcile(crashed.server, "deployer", task_id, {"outcome": "continue", "evidence": EVIDENCE})
    assert refused.status_code == 409
    assert refused.json()["error"]["reason"] == "cancellation_requested"
    assert claim_view(crashed.server, "deployer", task_id)["state"] == "needs_reconciliation"
    assert rollouts(crashed.ledger)[task_id] == 0


def test_uncertain_keeps_the_task_waiting_with_the_evidence_recorded(crashed: Crashed) -> None:
    task_id = crashed.take()
    evidence = {"note": "the rollout log ends mid-way", "log": "deploy.log:118"}
    response = reconcile(crashed.server, "deployer", task_id, {"outcome": "uncertain", "evidence": evidence})
    assert response.status_code == 200, response.text
    view = claim_view(crashed.server, "deployer", task_id)
    assert view["state"] == "needs_reconciliation"
    assert view["events"][-1]["operation"] == "reconcile_uncertain"
    assert view["events"][-1]["evidence"] == evidence
    task = get_task(crashed.server, "deployer", task_id)
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert status_text(task) == RECONCILE_TEXT
    assert rollouts(crashed.ledger)[task_id] == 0


def test_only_an_operator_may_reconcile(crashed: Crashed) -> None:
    task_id = crashed.interrupted[0]
    body = {"outcome": "completed", "evidence": EVIDENCE}
    assert reconcile(crashed.server, "deployer", task_id, body, headers=DEPLOYER).status_code == 404
    assert reconcile(crashed.server, "deployer", task_id, body, headers={}).status_code == 401
    assert reconcile(crashed.server, "test-runner", task_id, body, headers={}).status_code == 404
    assert reconcile(crashed.server, "deployer", "no-such-task", body).status_code == 404
    assert claim_view(crashed.server, "deployer", task_id)["state"] == "needs_reconciliation"


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        {"evidence": EVIDENCE},
        {"outcome": "rolled_back", "evidence": EVIDENCE},
        {"outcome": "completed"},
        {"outcome": "completed", "evidence": {}},
        {"outcome": "completed", "evidence": "looked at it"},
    ],
    ids=["not-json", "not-an-object", "no-outcome", "unknown-outcome", "no-evidence", "empty-evidence", "evidence-not-object"],
)
def test_bad_bodies_get_400(crashed: Crashed, body: object) -> None:
    task_id = crashed.interrupted[0]
    response = reconcile(crashed.server, "deployer", task_id, body)
    assert response.status_code == 400
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert claim_view(crashed.server, "deployer", task_id)["state"] == "needs_reconciliation"


@pytest.mark.parametrize("outcome", ["completed", "cancelled", "continue", "uncertain"])
def test_a_task_not_in_needs_reconciliation_is_refused(crashed: Crashed, outcome: str) -> None:
    task_id = crashed.waiting[0]
    response = reconcile(crashed.server, "deployer", task_id, {"outcome": outcome, "evidence": EVIDENCE})
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["reason"] == "invalid_transition"
    assert "awaiting_reply" in error["message"]
    assert claim_view(crashed.server, "deployer", task_id)["state"] == "awaiting_reply"


def test_a_deploy_waiting_for_approval_at_the_crash_still_waits_and_completes(crashed: Crashed) -> None:
    task_id = crashed.waiting[1]
    assert claim_view(crashed.server, "deployer", task_id)["state"] == "awaiting_reply"
    approve(crashed.server, task_id)
    wait_state(crashed.server, "deployer", task_id, "TASK_STATE_COMPLETED")
    refused = reconcile(crashed.server, "deployer", task_id, {"outcome": "completed", "evidence": EVIDENCE})
    assert refused.status_code == 409
    assert refused.json()["error"]["reason"] == "terminal"
    assert rollouts(crashed.ledger)[task_id] == 1


def test_claim_generations_increase_per_turn(server: ServerProcess) -> None:
    base = server.agent("code-reviewer")
    asked = rpc(base, "SendMessage", {"message": review_message("claim-view-review-1", "Review this diff of payments-api")})
    task = asked["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    view = claim_view(server, "code-reviewer", task["id"], headers={})
    assert (view["state"], view["claim_generation"], view["lease_until"]) == ("awaiting_reply", 1, None)
    assert operations(view) == ["create", "claim", "ask"]
    assert [e["claim_generation"] for e in view["events"]] == [0, 1, 1]
    assert view["events"][0]["evidence"] == {"message_id": "claim-view-review-1"}
    assert view["events"][2]["evidence"] == {
        "a2a_state": "TASK_STATE_INPUT_REQUIRED",
        "message": "Which base branch should I compare this diff against?",
    }

    answer = user_message("main", "claim-view-review-2", taskId=task["id"])
    done = rpc(base, "SendMessage", {"message": answer})["result"]["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    view = claim_view(server, "code-reviewer", task["id"], headers={})
    assert (view["state"], view["claim_generation"], view["lease_until"]) == ("completed", 2, None)
    assert operations(view) == ["create", "claim", "ask", "resume", "complete"]
    assert [e["claim_generation"] for e in view["events"]] == [0, 1, 1, 2, 2]
    assert view["events"][3]["evidence"] == {"message_id": "claim-view-review-2"}
    assert view["events"][4]["evidence"] == {"a2a_state": "TASK_STATE_COMPLETED", "message": "2 findings"}
    assert all(parse_iso(e["at"]) <= datetime.now(UTC) for e in view["events"])


def test_lease_while_working_and_cancellation_in_the_claim_view(server: ServerProcess) -> None:
    task = start(server, "test-runner", user_message(FULL_SUITE, "claim-view-run-1"))

    def working() -> dict | None:
        view = claim_view(server, "test-runner", task["id"], headers={})
        return view if view["state"] == "claimed" else None

    view = wait_for(working, what="the run to hold its claim")
    assert view["claim_generation"] == 1
    assert view["cancellation_requested"] is False
    assert view["lease_until"] is not None and parse_iso(view["lease_until"]) > datetime.now(UTC)

    canceled = rpc(server.agent("test-runner"), "CancelTask", {"id": task["id"]})["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    view = claim_view(server, "test-runner", task["id"], headers={})
    assert view["state"] == "cancelled"
    assert view["cancellation_requested"] is True
    assert view["lease_until"] is None
    assert operations(view)[-2:] == ["request_cancel", "report_cancelled"]
    assert view["events"][-2]["evidence"] == {"requested_by": "anonymous"}
    assert view["events"][-1]["evidence"]["a2a_state"] == "TASK_STATE_CANCELED"


def test_claim_view_is_for_the_owner_and_operators(server: ServerProcess) -> None:
    base = server.agent("test-runner")
    reply = rpc(base, "SendMessage", {"message": user_message(UNIT_TESTS, "claim-view-owner-1")}, headers=OPERATOR)
    task_id = reply["result"]["task"]["id"]
    assert httpx.get(f"{base}/tasks/{task_id}/claim", timeout=10).status_code == 404
    assert claim_view(server, "test-runner", task_id)["state"] == "completed"
    assert httpx.get(f"{base}/tasks/no-such-task/claim", headers=OPERATOR, timeout=10).status_code == 404
