"""Fencing in the store (issue 29), shown with real `a2a-bridge serve` replicas on one PostgreSQL database: a replica
paused past its lease (SIGSTOP) that wakes after another replica canceled or finished its task writes nothing over it
and never reports it running again; a replica whose clock runs 30 s ahead takes over no live claim; and a task whose
stored record fell behind its event log and whose claim went back a generation is still ended by an operator."""

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.claim_support import (
    DEPLOYER,
    FULL_SUITE,
    OPERATOR,
    OPERATOR_TOKEN,
    approve,
    claim_view,
    operations,
    reconcile,
    rolling_out,
    start,
    start_deploys,
)
from tests.support import A2A, ServerProcess, clock_of, rpc, user_message, wait_for

LEASE = 3
"""Seconds of a claim's lease in the pause tests: a pause of a few seconds outlives it."""
PACE = 1.0
"""Seconds of each test-runner step in the pause tests: a full suite (8 steps) outlasts a lease and a takeover."""
SLOW_STEP = 30.0
"""Seconds of each test-runner step on the replica that is paused mid-step: its step is not over when it wakes."""
FAST_STEP = 0.25
"""Seconds of each test-runner step on the replica that takes the turn over: it completes the task in 2 s."""
TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"}
ENDED_CLAIMS = {"completed", "cancelled", "failed"}
SKEW = 30
"""Seconds the skewed replica's clock runs ahead."""
SKEW_LEASE = 5
SKEW_PACE = 1.5
"""A full suite at this pace lasts 12 s, more than two leases of SKEW_LEASE: only renewals keep its claim."""
SKEW_TASKS = 6
STUCK_PACE = 3.0
"""Seconds of each deployer step where deploys are left stuck: the rollout the crash interrupts lasts this long."""


class Violations:
    """What a scenario found wrong; the test fails at the end with all of it, so one run shows every symptom."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def check(self, condition: bool, what: str) -> None:
        if not condition:
            self.found.append(what)

    def assert_none(self) -> None:
        if self.found:
            raise AssertionError("\n".join([f"{len(self.found)} fencing violations:", *self.found]))


@pytest.fixture
def replicas(pg_database: str, tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Starts replicas on the test database (`start(name, pace=, lease=, env=)`, log in tmp_path/NAME.log); every one
    is resumed if paused and stopped at the end."""
    started: list[ServerProcess] = []

    def start_replica(
        name: str, pace: float = PACE, lease: float = LEASE, env: dict[str, str] | None = None
    ) -> ServerProcess:
        extra = ["--lease", str(lease), "--operator-token", OPERATOR_TOKEN]
        process = ServerProcess(pg_database, pace=pace, log=tmp_path / f"{name}.log", env=env, extra=extra)
        started.append(process)
        return process.start()

    try:
        yield start_replica
    finally:
        for process in started:
            process.stop()


def query(database: str, statement: str, *args: Any) -> list[asyncpg.Record]:
    """Rows of one SQL statement on the test database."""

    async def run() -> list[asyncpg.Record]:
        connection = await asyncpg.connect(database)
        try:
            return await connection.fetch(statement, *args)
        finally:
            await connection.close()

    return asyncio.run(run())


def claim_events(database: str, task_id: str) -> list[tuple[int, str]]:
    """The task's stored claim events, (generation, operation), in the order they were stored."""
    rows = query(
        database, "SELECT claim_generation, operation FROM bridge_claim_events WHERE task_id = $1 ORDER BY id", task_id
    )
    return [(row["claim_generation"], row["operation"]) for row in rows]


def revision_and_last_seq(database: str, task_id: str) -> tuple[int, int]:
    """The record's revision and the highest sequence number of the task's event log."""
    [row] = query(
        database,
        "SELECT (SELECT revision FROM bridge_tasks WHERE task_id = $1) AS revision,"
        " (SELECT max(seq) FROM bridge_events WHERE task_id = $1) AS last_seq",
        task_id,
    )
    return row["revision"], row["last_seq"]


def backwards(events: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Events stored with a lower claim generation than an event stored before them."""
    highest, found = 0, []
    for generation, operation in events:
        if generation < highest:
            found.append((generation, operation))
        highest = max(highest, generation)
    return found


def state_on(process: ServerProcess, task_id: str, agent: str = "test-runner", headers: dict | None = None) -> str:
    """The task's state as GetTask answers it, or `error <code>`."""
    reply = rpc(process.agent(agent), "GetTask", {"id": task_id, "historyLength": 0}, headers=headers)
    if "error" in reply:
        return f"error {reply['error']['code']}"
    return str(reply["result"]["status"]["state"])


def start_long_run(process: ServerProcess) -> str:
    """A full-suite test-runner turn on `process`, returned once it works; its task id."""
    task_id = start(process, "test-runner", user_message(FULL_SUITE, f"fencing-{uuid.uuid4()}"))["id"]
    wait_for(lambda: state_on(process, task_id) == "TASK_STATE_WORKING", timeout=10, what=f"task {task_id} to work")
    return task_id


def states_for(processes: list[ServerProcess], task_id: str, seconds: float) -> list[tuple[float, str, str]]:
    """GetTask on each replica in turn for `seconds`: (seconds since the start, replica port, state) of each answer."""
    began = time.monotonic()
    answers = []
    while (elapsed := time.monotonic() - began) < seconds:
        for process in processes:
            answers.append((round(elapsed, 3), str(process.port), state_on(process, task_id)))
    return answers


def not_answered(answers: list[tuple[float, str, str]], state: str) -> list[tuple[float, str, str]]:
    return [answer for answer in answers if answer[2] != state]


def subscription(process: ServerProcess, task_id: str, seconds: float) -> tuple[list[dict], bool]:
    """SubscribeToTask on a replica for at most `seconds`: the envelopes it sent (a JSON answer is one) and whether the
    server ended the answer by itself; stops at the first envelope that shows the task WORKING."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    url = f"{process.agent('test-runner')}/a2a/jsonrpc"
    deadline = time.monotonic() + seconds
    envelopes: list[dict] = []
    try:
        with httpx.stream("POST", url, json=body, headers=A2A, timeout=seconds) as response:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                return [json.loads(response.read())], True
            for line in response.iter_lines():
                if line.startswith("data:"):
                    envelopes.append(json.loads(line[len("data:"):]))
                    if "TASK_STATE_WORKING" in line:
                        return envelopes, False
                if time.monotonic() > deadline:
                    return envelopes, False
            return envelopes, True
    except httpx.ReadTimeout:
        return envelopes, False


def streamed_states(envelopes: list[dict]) -> list[str]:
    """The task states an answer of SubscribeToTask shows, in order; `error <code>` for an error."""
    states = []
    for envelope in envelopes:
        if "error" in envelope:
            states.append(f"error {envelope['error']['code']}")
            continue
        result = envelope.get("result", {})
        status = (result.get("task") or result.get("statusUpdate") or result).get("status")
        if status is not None:
            states.append(status["state"])
    return states


def test_a_replica_woken_after_a_cancel_elsewhere_writes_nothing_over_it(
    pg_database: str, replicas: Callable[..., ServerProcess]
) -> None:
    """Issue 29 items 1 and 2: a long test-runner turn on A; A is paused (SIGSTOP) past its lease; CancelTask sent to B
    answers CANCELED, the cancel honoured by the takeover without running the turn again; once A is resumed the task
    stays CANCELED on both replicas, A writes nothing over B's claim (no claim event goes back a generation), the
    record's revision is the event log's last sequence number, and a follow-up is refused as for any ended task."""
    a, b = replicas("a"), replicas("b")
    task_id = start_long_run(a)
    found = Violations()
    a.pause()
    canceled = rpc(b.agent("test-runner"), "CancelTask", {"id": task_id})
    answered = canceled["result"]["status"]["state"] if "result" in canceled else f"error {canceled['error']}"
    found.check(answered == "TASK_STATE_CANCELED", f"CancelTask on B (A paused) answered {answered}, not CANCELED")

    def b_acted() -> bool:
        view = claim_view(b, "test-runner", task_id)
        return view["claim_generation"] > 1 or view["state"] in ENDED_CLAIMS

    wait_for(b_acted, timeout=4 * LEASE, what="B to take A's claim over or end the task")
    a.resume()
    answers = states_for([a, b], task_id, 3.0)
    wrong = not_answered(answers, "TASK_STATE_CANCELED")
    found.check(
        not wrong, f"after SIGCONT {len(wrong)} of {len(answers)} GetTask answers were not CANCELED: {wrong[:4]}"
    )

    events = claim_events(pg_database, task_id)
    ops = [operation for _, operation in events]
    found.check(
        "reconcile_continue" not in ops and "resume" not in ops,
        f"the turn ran again although the cancel was requested before the takeover: {events}",
    )
    found.check(not backwards(events), f"claim events went back a generation {backwards(events)}: {events}")
    revision, last_seq = revision_and_last_seq(pg_database, task_id)
    found.check(revision == last_seq, f"the record's revision {revision} is not the event log's last seq {last_seq}")
    follow_up = user_message(FULL_SUITE, f"after-{uuid.uuid4()}", taskId=task_id)
    reply = rpc(b.agent("test-runner"), "SendMessage", {"message": follow_up})
    found.check(
        reply.get("error", {}).get("code") == -32004,
        f"a follow-up to the canceled task answered {reply.get('error') or reply.get('result')}, not -32004",
    )
    found.assert_none()


def test_a_replica_woken_after_another_finished_its_task_never_reports_it_running(
    pg_database: str, replicas: Callable[..., ServerProcess]
) -> None:
    """Issue 29 item 3: A is paused (SIGSTOP) mid-turn past its lease, in a long step of its agent; B takes the
    repeat-safe turn over and completes it; from the moment A is resumed (a GetTask sent while it was paused, then
    GetTask after GetTask for 2 s), every answer on A is COMPLETED, never WORKING, and a SubscribeToTask on A shows no
    WORKING for the ended task."""
    a, b = replicas("a", pace=SLOW_STEP), replicas("b", pace=FAST_STEP)
    task_id = start_long_run(a)
    a.pause()
    wait_for(
        lambda: state_on(b, task_id) == "TASK_STATE_COMPLETED",
        timeout=8 * FAST_STEP + 6 * LEASE,
        what="B to complete the task it took over",
    )
    events = claim_events(pg_database, task_id)
    assert "reconcile_continue" in [operation for _, operation in events], f"B did not take the turn over: {events}"

    with ThreadPoolExecutor(2) as pool:
        queued: Future[str] = pool.submit(state_on, a, task_id)
        wait_for(lambda: queued.running(), what="a GetTask sent to A while paused")
        a.resume()
        subscribed = pool.submit(subscription, a, task_id, 5.0)
        answers = states_for([a], task_id, 2.0)
        answers.insert(0, (0.0, "queued while paused", queued.result(timeout=30)))
        envelopes, ended = subscribed.result(timeout=30)
    stale = not_answered(answers, "TASK_STATE_COMPLETED")
    streamed = streamed_states(envelopes)
    found = Violations()
    found.check(
        not stale, f"after SIGCONT {len(stale)} of {len(answers)} GetTasks on A for the COMPLETED task: {stale[:4]}"
    )
    found.check(
        "TASK_STATE_WORKING" not in streamed and ended,
        f"SubscribeToTask on A after SIGCONT showed {streamed}{'' if ended else ' and did not end'}",
    )
    found.assert_none()


def settled_states(process: ServerProcess, tasks: list[str], seconds: float) -> dict[str, str]:
    """The test-runner tasks' states on a replica once all have ended, or as they are after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        states = {task_id: state_on(process, task_id) for task_id in tasks}
        if set(states.values()) <= TERMINAL or time.monotonic() > deadline:
            return states
        time.sleep(0.25)


def test_a_replica_with_a_clock_30_s_ahead_takes_over_nothing(
    pg_database: str, replicas: Callable[..., ServerProcess], faketime_preload: str, tmp_path: Path
) -> None:
    """Issue 29 item 4: replica B's clock runs 30 s ahead (libfaketime), lease 5 s, no fault at all; A runs six turns
    that each outlast two leases, kept by renewals. B takes none of them over: no claim event invalidates or reconciles
    one, none has a generation above 1, all complete on A, and A logs no write that cannot be stored."""
    a = replicas("a", pace=SKEW_PACE, lease=SKEW_LEASE)
    b = replicas("b", pace=SKEW_PACE, lease=SKEW_LEASE, env={"LD_PRELOAD": faketime_preload, "FAKETIME": f"+{SKEW}s"})
    skew = clock_of(b) - clock_of(a)
    assert SKEW - 2 <= skew <= SKEW + 2, f"B's clock is {skew:.0f} s ahead of A's, not {SKEW} s: libfaketime not applied"
    messages = [user_message(FULL_SUITE, f"skew-{n}-{uuid.uuid4()}") for n in range(SKEW_TASKS)]
    tasks = [start(a, "test-runner", message)["id"] for message in messages]

    states = settled_states(a, tasks, 8 * SKEW_PACE + 2 * SKEW_LEASE)
    events = {task_id: claim_events(pg_database, task_id) for task_id in tasks}
    taken = {
        task_id: stored for task_id, stored in events.items()
        if any(op == "invalidate" or op.startswith("reconcile_") or generation > 1 for generation, op in stored)
    }
    found = Violations()
    found.check(
        not taken,
        f"{len(taken)} of {len(tasks)} live claims taken over by the skewed replica, e.g. {next(iter(taken.items()), None)}",
    )
    unfinished = {task_id: state for task_id, state in states.items() if state != "TASK_STATE_COMPLETED"}
    found.check(not unfinished, f"{len(unfinished)} of {len(tasks)} tasks did not complete: {unfinished}")
    unstorable = [line for line in (tmp_path / "a.log").read_text().splitlines() if "cannot be stored" in line]
    found.check(not unstorable, f"A logged {len(unstorable)} writes that cannot be stored, e.g. {unstorable[:1]}")
    found.assert_none()


def corrupt(database: str, task_id: str, generation: int, events: list[tuple[int, str, str]], cancel: bool) -> None:
    """Leave a task's stored state as the bug left it: the record's revision two below its event log's last seq, its
    claim at an older `generation` than stored claim events name (`events`: generation, operation, state, appended),
    and with `cancel` a cancellation recorded."""
    _, last_seq = revision_and_last_seq(database, task_id)
    assert last_seq > 2, f"task {task_id}: its event log ends at {last_seq}"
    query(
        database,
        "UPDATE bridge_tasks SET revision = $2, claim_generation = $3,"
        " cancellation_requested = cancellation_requested OR $4 WHERE task_id = $1",
        task_id, last_seq - 2, generation, cancel,
    )
    for event_generation, operation, state in events:
        query(
            database,
            "INSERT INTO bridge_claim_events (task_id, claim_generation, operation, state, evidence, at)"
            " VALUES ($1, $2, $3, $4, '{\"by\": \"tests/tasks/test_fencing.py\"}', now())",
            task_id, event_generation, operation, state,
        )


@dataclass
class Stuck:
    """Deploys whose stored state the bug's way was made by hand, on a replica started after it: two waited for
    approval, two were left mid-rollout by a crash (needs_reconciliation)."""

    server: ServerProcess
    waiting: list[str]
    interrupted: list[str]


@pytest.fixture(scope="module")
def stuck(pg_module_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stuck]:
    """Two deploys wait for approval and two are mid-rollout when their replica is killed; restarted, the two rollouts
    wait for an operator; the replica is killed again, all four are corrupted as the bug left them (the record two
    revisions behind the event log, the claim back at an older generation after a newer one), and a replica starts."""
    database, directory = pg_module_database, tmp_path_factory.mktemp("stuck")
    process = ServerProcess(
        database, pace=STUCK_PACE, log=directory / "deployer.log",
        extra=["--deploy-ledger", str(directory / "deploys.jsonl"), "--operator-token", OPERATOR_TOKEN],
    ).start()
    try:
        deploys = start_deploys(process, "stuck", 4)
        waiting, interrupted = deploys[:2], deploys[2:]
        approved_at = time.monotonic()
        for task_id in interrupted:
            approve(process, task_id)
        for task_id in interrupted:
            wait_for(lambda t=task_id: rolling_out(process, t), timeout=STUCK_PACE, what="a rollout to start")
        assert time.monotonic() - approved_at < STUCK_PACE, "a rollout may have ended before the crash"
        process.kill()
        process.start()
        for task_id in interrupted:
            wait_for(lambda t=task_id: claim_view(process, "deployer", t)["state"] == "needs_reconciliation",
                     what=f"task {task_id} to wait for an operator")
        process.kill()
        for task_id in waiting:
            corrupt(database, task_id, 1, [(2, "resume", "claimed"), (1, "ask", "awaiting_reply")], cancel=False)
        for task_id in interrupted:
            corrupt(database, task_id, 1, [(1, "request_cancel", "needs_reconciliation")], cancel=True)
        process.start()
        yield Stuck(process, waiting, interrupted)
    finally:
        process.stop()


def test_an_operator_cancel_ends_a_stuck_task(stuck: Stuck) -> None:
    """Issue 29 item 1, the aftermath: on deploys left stuck as the bug left them (waiting for approval), the operator's
    `POST /deployer/tasks/{id}/cancel` answers 200 and ends the first CANCELED, and CancelTask over JSON-RPC from its
    owner ends the second CANCELED; neither answers 500 or -32603."""
    by_operator, by_owner = stuck.waiting
    found = Violations()
    response = httpx.post(f"{stuck.server.agent('deployer')}/tasks/{by_operator}/cancel", headers=OPERATOR, timeout=30)
    found.check(response.status_code == 200, f"the operator's cancel answered {response.status_code}: {response.text[:200]}")
    said = response.json().get("state") if response.status_code == 200 else None
    found.check(said in (None, "TASK_STATE_CANCELED"), f"the operator's cancel answered 200 with the state {said}")
    final = state_on(stuck.server, by_operator, "deployer", DEPLOYER)
    found.check(final == "TASK_STATE_CANCELED", f"after the operator's cancel GetTask says {final}, not CANCELED")
    canceled = rpc(stuck.server.agent("deployer"), "CancelTask", {"id": by_owner}, headers=DEPLOYER)
    answered = canceled["result"]["status"]["state"] if "result" in canceled else f"error {canceled['error']}"
    found.check(answered == "TASK_STATE_CANCELED", f"CancelTask on the stuck task answered {answered}, not CANCELED")
    final = state_on(stuck.server, by_owner, "deployer", DEPLOYER)
    found.check(final == "TASK_STATE_CANCELED", f"after CancelTask GetTask says {final}, not CANCELED")
    found.assert_none()


@pytest.mark.parametrize(
    ("index", "outcome", "state"),
    [(0, "completed", "TASK_STATE_COMPLETED"), (1, "cancelled", "TASK_STATE_CANCELED")],
    ids=["completed", "cancelled"],
)
def test_an_operator_reconcile_ends_a_stuck_task(stuck: Stuck, index: int, outcome: str, state: str) -> None:
    """Issue 29 item 1, the aftermath: on a deploy left stuck as the bug left it (mid-rollout at a crash, waiting for an
    operator, a cancellation recorded), the operator's reconcile answers 200, stores the outcome on the claim and ends
    the task as reported."""
    task_id = stuck.interrupted[index]
    found = Violations()
    evidence = {"note": "checked the rollout log", "checked_by": "ops"}
    response = reconcile(stuck.server, "deployer", task_id, {"outcome": outcome, "evidence": evidence})
    found.check(response.status_code == 200, f"reconcile {outcome} answered {response.status_code}: {response.text[:200]}")
    view = claim_view(stuck.server, "deployer", task_id)
    found.check(view["state"] == outcome, f"after reconcile {outcome} the claim is {view['state']}: {operations(view)}")
    final = state_on(stuck.server, task_id, "deployer", DEPLOYER)
    found.check(final == state, f"after reconcile {outcome} GetTask says {final}, not {state}")
    found.assert_none()
