"""A crash in the middle of twenty turns loses no task and repeats no deploy; a canceled turn's late COMPLETED never
overwrites CANCELED."""

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, TaskState

from a2a_bridge.agents.base import Emitter
from a2a_bridge.app import AgentSpec, Bridge
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.core.task_status import WHO_MUST_ACT
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.claim_support import (
    FULL_SUITE,
    RECONCILE_TEXT,
    approve,
    awaiting_approval,
    claim_view,
    get_task,
    headers_for,
    message_ids,
    operations,
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
from tests.support import ServerProcess, rpc, serve_in_thread, user_message, wait_for

PACE = 2.0
"""Seconds of each sample-agent step: a review and a rollout last one step, the full suite eight."""
RUNS, REVIEWS, DEPLOYS, APPROVED = 6, 6, 8, 5


def started_ids(server: ServerProcess, agent: str, messages: list[dict[str, Any]]) -> list[str]:
    return [start(server, agent, message)["id"] for message in messages]


def working(server: ServerProcess, agent: str, task_id: str) -> dict[str, Any] | None:
    task = get_task(server, agent, task_id)
    return task if task["status"]["state"] == "TASK_STATE_WORKING" else None


def artifact_ids(task: dict[str, Any]) -> set[str]:
    return {artifact["artifactId"] for artifact in task.get("artifacts", [])}


def listed(server: ServerProcess, agent: str) -> set[str]:
    reply = rpc(server.agent(agent), "ListTasks", {"pageSize": 100}, headers=headers_for(agent))
    return {task["id"] for task in reply["result"]["tasks"]}


def test_a_crash_mid_turn_loses_nothing_and_deploys_nothing_twice(tmp_path: Path) -> None:
    ledger = tmp_path / "deploys.jsonl"
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", pace=PACE, extra=["--deploy-ledger", str(ledger)]).start()
    try:
        runs = started_ids(server, "test-runner", [user_message(FULL_SUITE, f"fault-run-{n}") for n in range(RUNS)])
        deploys = start_deploys(server, "fault-deploy", DEPLOYS)
        interrupted, waiting = deploys[:APPROVED], deploys[APPROVED:]
        before = {t: get_task(server, "deployer", t) for t in deploys}
        before |= {t: wait_for(lambda t=t: working(server, "test-runner", t), what="a run to work") for t in runs}

        approved_at = time.monotonic()
        for task_id in interrupted:
            approve(server, task_id)
        reviews = started_ids(server, "code-reviewer", [review_message(f"fault-review-{n}") for n in range(REVIEWS)])
        for task_id in reviews:
            before[task_id] = wait_for(lambda t=task_id: working(server, "code-reviewer", t), timeout=PACE, what="a review")
        for task_id in interrupted:
            wait_for(lambda t=task_id: rolling_out(server, t), timeout=PACE, what="a rollout to start")
        assert time.monotonic() - approved_at < PACE, "some reviews or rollouts may have ended before the crash"
        server.kill()

        continuing = {**dict.fromkeys(runs, "test-runner"), **dict.fromkeys(reviews, "code-reviewer")}
        agents = {**continuing, **dict.fromkeys(deploys, "deployer")}
        assert len(agents) == 20
        deployed_before_restart = rollouts(ledger)
        assert set(deployed_before_restart) <= set(interrupted)
        assert all(count == 1 for count in deployed_before_restart.values())
        server.start()

        for agent in ("test-runner", "code-reviewer", "deployer"):
            assert {t for t, a in agents.items() if a == agent} <= listed(server, agent)
        for task_id, agent in agents.items():
            after = get_task(server, agent, task_id)
            assert message_ids(before[task_id]) <= message_ids(after), f"{agent} task {task_id} lost messages"
            assert artifact_ids(before[task_id]) <= artifact_ids(after), f"{agent} task {task_id} lost artifacts"

        for task_id, agent in continuing.items():
            done = wait_state(server, agent, task_id, "TASK_STATE_COMPLETED", timeout=60)
            assert message_ids(before[task_id]) <= message_ids(done)
            view = stored_claim_view(server, agent, task_id)
            ops = operations(view)
            assert ops[ops.index("invalidate") + 1] == "reconcile_continue", ops
            fenced, resumed = view["events"][ops.index("invalidate")], view["events"][ops.index("reconcile_continue")]
            assert resumed["claim_generation"] == fenced["claim_generation"] + 1
            assert view["session_generation"] > fenced["evidence"]["session"]
            assert (view["state"], ops[-1]) == ("completed", "complete")
            if agent == "test-runner":
                assert len(done["artifacts"][0]["parts"]) == 8
            else:
                assert done["artifacts"][0]["parts"][1]["data"]["base"] == "main"

        for task_id in interrupted:
            view = claim_view(server, "deployer", task_id)
            assert (view["state"], operations(view)[-1]) == ("needs_reconciliation", "invalidate")
            assert (view["claim_generation"], view["lease_until"]) == (2, None)
            task = get_task(server, "deployer", task_id)
            assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
            assert status_text(task) == RECONCILE_TEXT
            assert task["status"]["message"]["metadata"][WHO_MUST_ACT] == {"actor": "operator", "action": "reconcile"}
        for task_id in waiting:
            assert claim_view(server, "deployer", task_id)["state"] == "awaiting_reply"
            assert awaiting_approval(server, task_id)
            approve(server, task_id)

        deployed = set(deployed_before_restart)
        by_hand = next(t for t in interrupted if t not in deployed)
        outcomes = {t: "completed" if t in deployed or t == by_hand else "continue" for t in interrupted}
        for task_id, outcome in outcomes.items():
            evidence = {"deploy_ledger": "has a line" if task_id in deployed else "has no line", "checked_by": "ops"}
            if task_id == by_hand:
                evidence["note"] = "rolled out from the release console"
            response = reconcile(server, "deployer", task_id, {"outcome": outcome, "evidence": evidence})
            assert response.status_code == 200, response.text
        for task_id in deploys:
            wait_state(server, "deployer", task_id, "TASK_STATE_COMPLETED", timeout=30)

        counts = rollouts(ledger)
        assert max(counts.values()) == 1
        assert {t for t, o in outcomes.items() if o == "continue"} | set(waiting) | deployed == set(counts)
        assert counts[by_hand] == 0
        for task_id, outcome in outcomes.items():
            view = claim_view(server, "deployer", task_id)
            assert f"reconcile_{outcome}" in operations(view)
            assert view["state"] == "completed"
        assert {get_task(server, a, t)["status"]["state"] for t, a in agents.items()} == {"TASK_STATE_COMPLETED"}
    finally:
        server.stop()


class Stubborn(AgentExecutor):
    """Ignores the cancellation of its turn and reports COMPLETED anyway: once while the cancel runs, once after the
    task is CANCELED."""

    def __init__(self) -> None:
        self.canceled = asyncio.Event()
        self.late_sent = threading.Event()
        self.late: asyncio.Future[None] | None = None

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        out = Emitter(event_queue, context, lambda: str(uuid.uuid4()))
        await out.status(TaskState.TASK_STATE_WORKING, "Working")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await out.status(TaskState.TASK_STATE_COMPLETED, "Done anyway")
            self.late = asyncio.ensure_future(self._after_cancel(out))

    async def _after_cancel(self, out: Emitter) -> None:
        await self.canceled.wait()
        await out.status(TaskState.TASK_STATE_COMPLETED, "Done after the cancel")
        self.late_sent.set()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await Emitter(event_queue, context, lambda: str(uuid.uuid4())).status(TaskState.TASK_STATE_CANCELED, "Stopped")
        self.canceled.set()


@pytest.fixture
def stubborn() -> Iterator[tuple[str, Stubborn]]:
    agent = Stubborn()
    card = AgentCard(
        name="stubborn",
        description="Ignores cancellation; exists only in the tests.",
        version="0.0.1",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="work", name="Work", description="Works.", tags=["test"])],
    )
    stores = Stores(StoreConfig.parse("memory"))
    bridge = Bridge([AgentSpec("stubborn", card, agent)], stores, SystemClock(), lambda: str(uuid.uuid4()))
    with serve_in_thread(bridge.app()) as base:
        yield f"{base}/stubborn", agent


def test_a_late_completed_from_a_canceled_turn_never_overwrites_canceled(
    stubborn: tuple[str, Stubborn], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="a2a_bridge")
    base, agent = stubborn
    params = {"message": user_message("Work until stopped", "stubborn-1"), "configuration": {"returnImmediately": True}}
    task_id = rpc(base, "SendMessage", params)["result"]["task"]["id"]
    wait_for(lambda: rpc(base, "GetTask", {"id": task_id})["result"]["status"]["state"] == "TASK_STATE_WORKING", what="WORKING")

    canceled = rpc(base, "CancelTask", {"id": task_id})["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    wait_for(agent.late_sent.is_set, what="the late COMPLETED")

    task = rpc(base, "GetTask", {"id": task_id})["result"]
    assert task["status"]["state"] == "TASK_STATE_CANCELED"
    assert task["status"]["message"]["parts"][0]["text"] == "Stopped"
    texts = {part.get("text") for message in task["history"] for part in message["parts"]}
    assert not texts & {"Done anyway", "Done after the cancel"}
    view = httpx.get(f"{base}/tasks/{task_id}/claim", timeout=10).json()
    assert view["state"] == "cancelled"
    assert "complete" not in operations(view)
    assert operations(view)[-2:] == ["request_cancel", "report_cancelled"]
    dropped = [r.getMessage() for r in caplog.records if "dropped an event" in r.getMessage() and task_id in r.getMessage()]
    assert len(dropped) == 2, dropped


def test_concurrent_first_requests_on_a_fresh_store_all_succeed(tmp_path: Path) -> None:
    """The SDK's stores create their tables on first use; two first uses at once raced to create the same table and one
    request failed with an internal error. The bridge creates the tables when it starts."""
    server = ServerProcess(f"sqlite:///{tmp_path / 'fresh.db'}").start()
    try:
        calls = [("ListTasks", {"pageSize": 10})] * 6 + [("GetTask", {"id": "no-such-task"})] * 6
        with ThreadPoolExecutor(len(calls)) as pool:
            replies = list(pool.map(lambda call: rpc(server.agent("test-runner"), *call), calls))
        assert [r.get("error", {}).get("code") for r in replies] == [None] * 6 + [-32001] * 6, replies
    finally:
        server.stop()
