"""The console's overview and a task's timeline, with one task of each kind that needs the operator planted on a
SQLite store: a deploy waiting for approval, two deploys a crash left in needs_reconciliation (one then reconciled as
uncertain, with a reason), a webhook given up (a dead letter), a turn that raised, and a claim past its lease. The
overview API and the page (headless Chromium, tests/browser/console.mjs) name each, say why and offer its action; each
task's timeline holds what happened to it; the page is read at 1280, 800 and 420 px (the screenshots in docs/ are
these), and an approval is given from the queue with the keyboard alone, with its reason on the timeline."""

import json
import sqlite3
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.populate import clone_tasks
from tests.claim_support import (
    CRASH_PACE,
    OPERATOR,
    UNIT_TESTS,
    crash_mid_rollout,
    review_message,
    start,
    start_deploys,
    wait_state,
)
from tests.ops.test_console_browser import SCREENSHOTS, dead_letters_of, drive, node  # noqa: F401 - node: a fixture
from tests.ops.test_operator_cli import DEAD_LETTERS, hooked
from tests.push.test_push_outbox import Receiver
from tests.support import ServerProcess, rpc, user_message, wait_for

KINDS = ("approval", "needs_reconciliation", "uncertain", "past_lease", "dead_letter", "failed")
UNCERTAIN_REASON = "the rollout log was lost"
RAISED = "the raising agent gave up"
DB_TIME = "%Y-%m-%d %H:%M:%S.%f"
"""How the SQLite store writes a time (UTC, without its zone)."""


def plant_past_lease(db: Path, template: str, session: int) -> str:
    """A test-runner task whose turn holds its claim past its lease, as a turn leaves it when its lease renewals do not
    reach the store: a copy of a finished task (the bench's bulk copy through the store's own tables), set back to
    WORKING, claimed by the running server's session, with a lease that ran out seven minutes ago. The server's lease
    sweep (every third of --lease) would recover it; this test's --lease keeps that an hour away."""
    [task_id] = clone_tasks(db, template, 1)
    past = (datetime.now(UTC) - timedelta(minutes=7)).strftime(DB_TIME)
    with sqlite3.connect(db, timeout=30) as conn:
        conn.execute(
            "UPDATE bridge_tasks SET state = 'TASK_STATE_WORKING', claim_state = 'claimed', claim_generation = 1, "
            "session_generation = ?, lease_until = ?, revision = revision + 1 WHERE task_id = ?",
            (session, past, task_id),
        )
        conn.execute("DELETE FROM bridge_claim_events WHERE task_id = ? AND operation NOT IN ('create', 'claim')", (task_id,))
        [status] = conn.execute("SELECT status FROM tasks_test_runner WHERE id = ?", (task_id,)).fetchone()
        status = {**json.loads(status), "state": "TASK_STATE_WORKING"}
        status.pop("message", None)
        conn.execute("UPDATE tasks_test_runner SET status = ?, artifacts = '[]' WHERE id = ?", (json.dumps(status), task_id))
    return task_id


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    """A server with one task of each kind that needs the operator; the task ids by kind."""
    folder = tmp_path_factory.mktemp("overview")
    db = folder / "b.db"
    receiver = Receiver(answer=500)
    receiver.up()
    extra = [
        *DEAD_LETTERS, "--deploy-ledger", str(folder / "deploys.jsonl"), "--lease", "3600",
        "--agent", "test-runner", "--agent", "deployer", "--agent", "tests.user_agents:raising",
    ]
    server = ServerProcess(f"sqlite:///{db}", pace=CRASH_PACE, extra=extra).start()
    try:
        ids = {"needs_reconciliation": crash_mid_rollout(server, "attn-nr"), "uncertain": crash_mid_rollout(server, "attn-unc")}
        body = {
            "outcome": "uncertain", "evidence": {"note": "staging shows no build", "checked_by": "overview test"},
            "reason": UNCERTAIN_REASON,
        }
        answer = httpx.post(f"{server.agent('deployer')}/tasks/{ids['uncertain']}/reconcile", json=body, headers=OPERATOR, timeout=10)
        assert answer.status_code == 200, answer.text
        [ids["approval"]] = start_deploys(server, "attn-approve", 1)
        ids["dead_letter"] = hooked(server, "test-runner", UNIT_TESTS, receiver.url, "attn-hook")
        rpc(server.agent("raising"), "SendMessage", {"message": user_message("raise now", f"raise-{uuid.uuid4()}")})
        failed = httpx.get(f"{server.url}/console/api/tasks?agent=raising", headers=OPERATOR, timeout=10).json()["tasks"]
        ids["failed"] = failed[0]["id"]
        template = rpc(server.agent("test-runner"), "SendMessage", {"message": user_message(UNIT_TESTS, f"tpl-{uuid.uuid4()}")})
        session = httpx.get(f"{server.url}/readyz", timeout=10).json()["session"]
        ids["past_lease"] = plant_past_lease(db, template["result"]["task"]["id"], session)
        dead_letters_of(server, [ids["dead_letter"]])
        yield server, ids
    finally:
        server.stop()
        receiver.down()


def overview(server: ServerProcess) -> dict[str, Any]:
    answer = httpx.get(f"{server.url}/console/api/overview", headers=OPERATOR, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


def detail(server: ServerProcess, task_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{server.url}/console/api/tasks/{task_id}", headers=OPERATOR, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_overview_names_each_task_that_needs_the_operator_with_why_and_what(planted: tuple[ServerProcess, dict[str, str]]) -> None:
    server, ids = planted
    body = overview(server)
    items = {item["kind"]: item for item in body["attention"]["items"] if item["taskId"] in ids.values()}
    assert set(items) == set(KINDS), body["attention"]
    assert {kind: items[kind]["taskId"] for kind in KINDS} == ids
    assert body["attention"]["counts"] == dict.fromkeys(KINDS, 1)
    assert items["approval"]["actions"] == ["approve", "cancel"] and "approval" in items["approval"]["why"]
    assert items["needs_reconciliation"]["actions"] == ["reconcile", "cancel"]
    assert "uncertain" in items["uncertain"]["why"] and items["uncertain"]["actions"][0] == "reconcile"
    assert items["past_lease"]["actions"] == ["cancel"] and "lease ended" in items["past_lease"]["why"]
    assert items["dead_letter"]["actions"] == ["redeliver"] and items["dead_letter"]["webhook"]["configId"] == "attn-hook"
    assert "HTTP 500" in items["dead_letter"]["why"]
    assert items["failed"]["failure"] == {"type": "RuntimeError", "message": RAISED}
    assert all(item["what"] for item in items.values())
    agents = {row["agent"]: row for row in body["agents"]}
    assert agents["deployer"]["claims"]["needs_reconciliation"] == 2 and agents["deployer"]["states"]["AUTH_REQUIRED"] == 3
    assert agents["raising"]["states"] == {"FAILED": 1} and agents["raising"]["phases"] == {"terminal": 1}
    assert agents["test-runner"]["claims"]["claimed"] == 1
    assert len(body["traffic"]) == 60 and sum(minute["requests"] for minute in body["traffic"]) >= 2
    assert sum(minute["failed"] for minute in body["traffic"]) == 1, "the raising turn, counted by this process"
    assert body["store"]["kind"] == "sqlite" and body["store"]["ok"] is True
    assert {"this": True, "status": "this process"}.items() <= body["sessions"]["sessions"][-1].items()


def test_each_tasks_timeline_says_what_happened_and_who_must_act(planted: tuple[ServerProcess, dict[str, str]]) -> None:
    server, ids = planted
    failed = detail(server, ids["failed"])
    assert [e["title"] for e in failed["timeline"] if e["kind"] == "failure"] == ["RuntimeError"]
    assert [e["detail"] for e in failed["timeline"] if e["kind"] == "failure"] == [RAISED]
    assert failed["waiting"] is None
    uncertain = detail(server, ids["uncertain"])
    approved, action = [e for e in uncertain["timeline"] if e["kind"] == "operator"]
    assert "resume" in approved["title"] and approved["reason"] is None, "the crash test's approval, without a reason"
    assert action["reason"] == UNCERTAIN_REASON and "reconcile uncertain" in action["title"]
    assert uncertain["waiting"]["who"] == "operator"
    claimed = next(e for e in uncertain["timeline"] if e["kind"] == "claim" and e["title"].startswith("claim "))
    assert claimed["session"] >= 1 and claimed["lease"] > claimed["at"], "each claim operation keeps its session and lease"
    claim = [e["title"].split(" ")[0] for e in uncertain["timeline"] if e["kind"] == "claim"]
    assert claim[:4] == ["create", "claim", "ask", "resume"] and claim[-2:] == ["invalidate", "reconcile_uncertain"]
    approval = detail(server, ids["approval"])
    assert approval["waiting"]["who"] == "operator" and approval["waiting"]["what"] == "approve"
    assert "AUTH_REQUIRED" in [e["title"] for e in approval["timeline"] if e["kind"] == "a2a"]
    dead = detail(server, ids["dead_letter"])
    assert any(e["kind"] == "webhook" and "given up" in e["title"] and "HTTP 500" in e["detail"] for e in dead["timeline"])
    past = detail(server, ids["past_lease"])
    assert past["waiting"]["who"] == "bridge" and "lease" in past["waiting"]["what"]
    owner_view = httpx.get(f"{server.agent('raising')}/tasks/{ids['failed']}/claim", timeout=10)
    assert owner_view.status_code == 200, "the demo's anonymous caller owns the task it sent"
    assert owner_view.json()["events"][-1]["operation"] == "fail"
    assert all("failure" not in event["evidence"] for event in owner_view.json()["events"]), "the error is the operator's"
    operator_view = httpx.get(f"{server.agent('raising')}/tasks/{ids['failed']}/claim", headers=OPERATOR, timeout=10)
    assert operator_view.json()["events"][-1]["evidence"]["failure"] == {"type": "RuntimeError", "message": RAISED}


def test_the_page_shows_the_queue_the_timelines_and_acts_from_the_keyboard(
    node: str, planted: tuple[ServerProcess, dict[str, str]]  # noqa: F811 - the fixture
) -> None:
    server, ids = planted
    steps = drive(node, "overview", server.url, str(SCREENSHOTS), json.dumps(ids))
    shown = {(item["kind"], item["task"]): item for item in steps["overview"]["items"]}
    for kind in KINDS:
        item = shown[(kind, ids[kind])]
        assert item["why"] and item["what"], item
    assert shown[("approval", ids["approval"])]["actions"] == ["approve", "cancel"]
    assert shown[("dead_letter", ids["dead_letter"])]["actions"] == ["redeliver"]
    assert shown[("needs_reconciliation", ids["needs_reconciliation"])]["actions"] == ["reconcile", "cancel"]
    assert RAISED in shown[("failed", ids["failed"])]["why"]
    assert steps["overview"]["counts"] == dict.fromkeys(KINDS, 1)
    assert steps["overview"]["agents"]["deployer"]["claims"]["needs_reconciliation"] == 2
    assert steps["overview"]["charts"]["chart-throughput"]["bars"] > 0
    assert steps["overview"]["store"]["ok"] == "true"
    for width, seen in steps["overview"]["layout"].items():
        assert seen["scrollWidth"] <= int(width) and seen["cut"] == [], (width, seen)
    timelines = steps["timelines"]
    assert "RuntimeError" in timelines["failed"]["failure"] and RAISED in timelines["failed"]["failure"]
    assert timelines["failed"]["waiting"] == ""
    assert any(e["kind"] == "operator" and UNCERTAIN_REASON in e["text"] for e in timelines["uncertain"]["entries"])
    assert timelines["approval"]["waiting"] == "operator" and "approve" in timelines["approval"]["waitingText"]
    assert any(e["kind"] == "webhook" and "given up" in e["title"] for e in timelines["dead_letter"]["entries"])
    assert timelines["past_lease"]["waiting"] == "bridge"
    assert timelines["needs_reconciliation"]["waiting"] == "operator"
    keyboard = steps["keyboard"]
    assert keyboard["focused"] == "confirm-reason" and keyboard["onConfirm"] == "confirm-yes", keyboard
    assert "goes on at once" in keyboard["said"]
    events = httpx.get(f"{server.agent('deployer')}/tasks/{ids['approval']}/claim", headers=OPERATOR, timeout=10).json()["events"]
    assert any(e["operation"] == "resume" and e["evidence"].get("reason") == "release train 42" for e in events)
    escape = steps["escape"]
    assert escape["stays"] and escape["task"] == ids["past_lease"] and "CANCELED" in escape["cancelSaid"]
    record = wait_for(lambda: detail(server, ids["past_lease"]), what="the past-lease task")
    assert record["row"]["claim"]["state"] == "claimed", "Escape sent nothing"
    assert steps["live"]["sameDocument"] is True, "a new failure reached the open overview without a reload"


def test_a_review_waiting_says_which_user_must_act_and_since_when(tmp_path: Path) -> None:
    server = ServerProcess("memory", pace=0.01, extra=["--agent", "code-reviewer"]).start()
    try:
        text = "Review this diff of payments-api against main; ask me before posting"
        task = start(server, "code-reviewer", review_message(f"review-{uuid.uuid4()}", text))
        waited = wait_state(server, "code-reviewer", task["id"], "TASK_STATE_AUTH_REQUIRED")
        body = detail(server, task["id"])
    finally:
        server.stop()
    assert [n["kind"] for n in body["row"]["status"]["notifications"]] == ["review_required"]
    who = body["row"]["waiting"]
    assert who["who"].startswith("user ") and "review" in who["what"], who
    assert body["waiting"] == {**who, "since": body["waiting"]["since"]}
    assert body["waiting"]["since"] == waited["status"]["timestamp"].replace("Z", "")[:23] + "Z"
