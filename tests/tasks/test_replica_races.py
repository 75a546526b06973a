"""Replicas on one PostgreSQL database (issue 13): the same message sent to two replicas a few milliseconds apart runs
once and both callers get that turn's result; SubscribeToTask's snapshot and the events after it fold to exactly what
GetTask returns (one server on SQLite, and across replicas); a replica killed mid-turn: a cancel sent to the other is
answered CANCELED within seconds and the work never runs again; a replica whose session connection is cut stops
taking turns, says so, and comes back under a new session without anything run twice."""

import asyncio
import contextlib
import json
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Part, TaskState

from a2a_bridge.agents.base import Emitter
from a2a_bridge.app import AgentSpec, Bridge
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.store.ledger import HELD
from a2a_bridge.store.ledger_tables import SESSION_LOCKS
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.claim_support import FULL_SUITE
from tests.support import A2A, ServerProcess, rpc, serve_in_thread, user_message, wait_for
from tests.user_agents import RUNS, runs

ROOT = Path(__file__).resolve().parents[2]
PAIRS = 60
CHUNKS = 8
PAUSE = 0.05
"""Seconds the agent waits after each log line: subscribers arrive while it writes."""
TASKS = 20
LINES = [f"line {index}" for index in range(CHUNKS)]
"""The log the agent writes, chunk by chunk."""
SUBSCRIBERS = 10
"""Streams per task: TASKS x SUBSCRIBERS = 200."""
AT_ONCE = 3
"""Tasks watched at once on one server: their streams stay within its 32 streams per principal. Across replicas one
at a time: the three servers of this process share its interpreter, and 30 streams at once would delay most
subscriptions past the end of their task."""


class Runs:
    """How often the agent ran for each messageId, across the replicas of this process (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def add(self, message_id: str) -> None:
        with self.lock:
            self.counts[message_id] += 1

    def of(self, message_id: str) -> int:
        with self.lock:
            return self.counts[message_id]


class Chunks(AgentExecutor):
    """WORKING, then CHUNKS lines appended to one artifact (PAUSE after each), then FAILED when the text says "fail",
    else COMPLETED."""

    repeat_safe = True

    def __init__(self, runs: Runs) -> None:
        self.runs = runs

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        self.runs.add(context.message.message_id)
        out = Emitter(event_queue, context, lambda: str(uuid.uuid4()))
        await out.status(TaskState.TASK_STATE_WORKING, "working")
        for index in range(CHUNKS):
            last = index == CHUNKS - 1
            await out.artifact("log", [Part(text=f"line {index}")], name="log" if index == 0 else None, append=index > 0, last_chunk=last)
            await asyncio.sleep(PAUSE)
        failed = "fail" in context.get_user_input()
        await out.status(TaskState.TASK_STATE_FAILED if failed else TaskState.TASK_STATE_COMPLETED, "done")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await Emitter(event_queue, context, lambda: str(uuid.uuid4())).status(TaskState.TASK_STATE_CANCELED, "canceled")


def chunks_card() -> AgentCard:
    return AgentCard(
        name="chunks",
        description="Writes a log in chunks; exists only in the tests.",
        version="0.0.1",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="log", name="Log", description="Writes a log.", tags=["test"])],
    )


@contextlib.contextmanager
def servers(store: str, runs: Runs, count: int) -> Iterator[list[str]]:
    """`count` bridge servers (each its own event loop, engine and session) on one store."""
    with contextlib.ExitStack() as stack:
        bases = []
        for _ in range(count):
            bridge = Bridge([AgentSpec("chunks", chunks_card(), Chunks(runs))], Stores(StoreConfig.parse(store)), SystemClock(), lambda: str(uuid.uuid4()))
            bases.append(stack.enter_context(serve_in_thread(bridge.app())) + "/chunks")
        yield bases


async def call(client: httpx.AsyncClient, base: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = await client.post(f"{base}/a2a/jsonrpc", json=body, headers=A2A, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


async def streamed(client: httpx.AsyncClient, base: str, method: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The frames of one streaming call (one error envelope if the answer is not a stream)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with client.stream("POST", f"{base}/a2a/jsonrpc", json=body, headers=A2A, timeout=30) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            await response.aread()
            return [response.json()]
        return [json.loads(line.removeprefix("data:").strip()) async for line in response.aiter_lines() if line.startswith("data:")]


def as_reply(frames: list[dict[str, Any]]) -> dict[str, Any]:
    """A stream folded into what a blocking call answers: its first task with the last status and every log line."""
    if "error" in frames[0] or any("error" in frame for frame in frames):
        return next(frame for frame in frames if "error" in frame)
    state, lines, arrived = fold(frames)
    task = dict(frames[0]["result"]["task"])
    task["status"] = {"state": state}
    return {"result": {"task": task}, "lines": lines, "arrived": arrived}


async def race(a: str, b: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """PAIRS messages, each sent to A and then to B 0-10 ms later (a few pairs at a time; every fourth one streamed
    to B); the two replies of each, B's stream folded into a reply."""
    spacing = random.Random(13)
    gate = asyncio.Semaphore(6)

    async def pair(client: httpx.AsyncClient, index: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
        message = user_message("fail" if index % 3 == 0 else "pass", f"race-{index}-{uuid.uuid4()}")
        gap = spacing.uniform(0, 0.010)
        async with gate:
            first = asyncio.ensure_future(call(client, a, "SendMessage", {"message": message}))
            await asyncio.sleep(gap)
            if index % 4 == 1:
                second = as_reply(await streamed(client, b, "SendStreamingMessage", {"message": message}))
            else:
                second = await call(client, b, "SendMessage", {"message": message})
            return message["messageId"], await first, second

    async with httpx.AsyncClient() as client:
        return await asyncio.gather(*(pair(client, index) for index in range(PAIRS)))


def test_the_same_message_sent_to_two_replicas_runs_once(pg_database: str) -> None:
    runs = Runs()
    with servers(pg_database, runs, 2) as (a, b):
        replies = asyncio.run(race(a, b))
        problems: list[str] = []
        for message_id, first, second in replies:
            if "error" in first or "error" in second:
                problems.append(f"{message_id}: error {first.get('error') or second.get('error')}")
                continue
            task, joined = first["result"]["task"], second["result"]["task"]
            expected = "TASK_STATE_FAILED" if message_id.startswith(tuple(f"race-{i}-" for i in range(0, PAIRS, 3))) else "TASK_STATE_COMPLETED"
            states = (task["status"]["state"], joined["status"]["state"])
            stored = [rpc(base, "GetTask", {"id": task["id"]})["result"]["status"]["state"] for base in (a, b)]
            claim = httpx.get(f"{a}/tasks/{task['id']}/claim", timeout=10).json()
            operations = [event["operation"] for event in claim["events"]]
            if joined["id"] != task["id"]:
                problems.append(f"{message_id}: two tasks {task['id']} and {joined['id']}")
            if states != (expected, expected) or stored != [expected, expected]:
                problems.append(f"{message_id}: replies {states}, stored {stored}, expected {expected}")
            if runs.of(message_id) != 1:
                problems.append(f"{message_id}: the agent ran {runs.of(message_id)} times")
            if operations != ["create", "claim", "fail" if expected == "TASK_STATE_FAILED" else "complete"]:
                problems.append(f"{message_id}: claim events {operations}")
            if "lines" in joined and (joined["lines"] != LINES or len(joined["arrived"]) != len(set(joined["arrived"]))):
                problems.append(f"{message_id}: the stream on B folded to {joined['lines']} (arrived {joined['arrived']})")
        assert not problems, "\n".join(problems)


class Gate(AgentExecutor):
    """WORKING, then waits until `release` is set, then COMPLETED; `started` is set once it runs."""

    repeat_safe = True

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        out = Emitter(event_queue, context, lambda: str(uuid.uuid4()))
        await out.status(TaskState.TASK_STATE_WORKING, "working")
        self.started.set()
        await asyncio.to_thread(self.release.wait, 30)
        await out.status(TaskState.TASK_STATE_COMPLETED, "done")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await Emitter(event_queue, context, lambda: str(uuid.uuid4())).status(TaskState.TASK_STATE_CANCELED, "canceled")


def test_a_retry_whose_turn_ends_on_another_replica_while_it_looks_gets_the_end(pg_database: str) -> None:
    """The same message sent to B while its turn runs on A, the turn ending between B's read of the task (working,
    claimed) and B's join of that turn: B answers the task as it ended, not the read before."""
    gate = Gate()
    staged = threading.Event()
    bridges = [
        Bridge([AgentSpec("chunks", chunks_card(), gate)], Stores(StoreConfig.parse(pg_database)), SystemClock(), lambda: str(uuid.uuid4()))
        for _ in range(2)
    ]
    host = bridges[1].agents["chunks"].host
    read = host.read

    async def read_then_end(task_id: str, context: Any) -> Any:
        """B's first read of the running task, returned once A's turn has ended after it."""
        found = await read(task_id, context)
        if found is None or staged.is_set() or found[0].claim.state not in HELD:
            return found
        staged.set()
        gate.release.set()
        deadline = time.monotonic() + 20
        while (record := await host.ledger.get(task_id)) is not None and record.claim.state in HELD:
            assert time.monotonic() < deadline, "the turn on A did not end"
            await asyncio.sleep(0.02)
        return found

    host.read = read_then_end  # type: ignore[method-assign]
    with contextlib.ExitStack() as stack:
        a, b = (stack.enter_context(serve_in_thread(bridge.app())) + "/chunks" for bridge in bridges)
        message = user_message("go", f"late-{uuid.uuid4()}")
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(rpc, a, "SendMessage", {"message": message})
            assert gate.started.wait(20), "the turn did not start on A"
            second = rpc(b, "SendMessage", {"message": message})
            answered = first.result(30)
    assert staged.is_set(), "B never read the task while A's turn ran"
    states = [reply["result"]["task"]["status"]["state"] for reply in (answered, second)]
    assert states == ["TASK_STATE_COMPLETED", "TASK_STATE_COMPLETED"], f"replies {states}"


def fold(frames: list[dict[str, Any]]) -> tuple[str, list[str], list[str]]:
    """The state and log lines a client folding a SubscribeToTask stream holds at its end, and the log lines as they
    arrived (the snapshot's, then each appended chunk)."""
    task = frames[0]["result"]["task"]
    state = task["status"]["state"]
    lines = [part["text"] for artifact in task.get("artifacts", []) if artifact["artifactId"] == "log" for part in artifact["parts"]]
    arrived = list(lines)
    for frame in frames[1:]:
        result = frame["result"]
        if "artifactUpdate" in result:
            update = result["artifactUpdate"]
            texts = [part["text"] for part in update["artifact"]["parts"]]
            lines = lines + texts if update.get("append") else texts
            arrived += texts
        elif "statusUpdate" in result:
            state = result["statusUpdate"]["status"]["state"]
        elif "task" in result:
            state = result["task"]["status"]["state"]
    return state, lines, arrived


async def subscribe(client: httpx.AsyncClient, base: str, task_id: str, delay: float) -> list[dict[str, Any]]:
    """The frames of one SubscribeToTask stream opened after `delay` seconds (an error frame if the task had ended)."""
    await asyncio.sleep(delay)
    body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    frames: list[dict[str, Any]] = []
    async with client.stream("POST", f"{base}/a2a/jsonrpc", json=body, headers=A2A, timeout=30) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            await response.aread()
            return [response.json()]
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                frames.append(json.loads(line.removeprefix("data:").strip()))
    return frames


async def watched_tasks(runner: str, watcher: str, at_once: int) -> list[tuple[str, list[list[dict[str, Any]]]]]:
    """TASKS tasks started on `runner`, each followed by SUBSCRIBERS streams on `watcher` opened while it writes."""
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=100)) as client:

        async def one(index: int) -> tuple[str, list[list[dict[str, Any]]]]:
            message = user_message("pass", f"fold-{index}-{uuid.uuid4()}")
            reply = await call(client, runner, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}})
            task_id = reply["result"]["task"]["id"]
            streams = [subscribe(client, watcher, task_id, n * PAUSE * CHUNKS / (2 * SUBSCRIBERS)) for n in range(SUBSCRIBERS)]
            return task_id, list(await asyncio.gather(*streams))

        results: list[tuple[str, list[list[dict[str, Any]]]]] = []
        for start in range(0, TASKS, at_once):
            results += await asyncio.gather(*(one(index) for index in range(start, min(start + at_once, TASKS))))
        return results


def check_folds(runner: str, results: list[tuple[str, list[list[dict[str, Any]]]]]) -> None:
    folded = 0
    problems: list[str] = []
    for task_id, streams in results:
        task = rpc(runner, "GetTask", {"id": task_id})["result"]
        stored_lines = [part["text"] for artifact in task["artifacts"] if artifact["artifactId"] == "log" for part in artifact["parts"]]
        assert stored_lines == LINES
        for frames in streams:
            if "error" in frames[0]:
                if frames[0]["error"]["data"][0]["metadata"].get("state") != "TASK_STATE_COMPLETED":
                    problems.append(f"{task_id}: SubscribeToTask refused: {frames[0]['error']}")
                continue
            folded += 1
            state, lines, arrived = fold(frames)
            if len(arrived) != len(set(arrived)):
                problems.append(f"{task_id}: a repeated chunk {arrived}")
            if (state, lines) != (task["status"]["state"], stored_lines):
                problems.append(f"{task_id}: folded {state} {lines}, GetTask {task['status']['state']} {stored_lines}")
    assert not problems, "\n".join(problems[:20])
    assert folded >= TASKS * SUBSCRIBERS // 2, f"only {folded} of {TASKS * SUBSCRIBERS} streams began before their task ended"


@pytest.mark.parametrize("store", ["sqlite", "memory"])
def test_subscriptions_fold_to_the_stored_task_on_one_server(tmp_path: Path, store: str) -> None:
    with servers(f"sqlite:///{tmp_path / 'fold.db'}" if store == "sqlite" else "memory", Runs(), 1) as (server,):
        check_folds(server, asyncio.run(watched_tasks(server, server, AT_ONCE)))


def test_subscriptions_fold_to_the_stored_task_across_replicas(pg_database: str) -> None:
    with servers(pg_database, Runs(), 2) as (a, b):
        check_folds(a, asyncio.run(watched_tasks(a, b, 1)))


def claim_of(server: ServerProcess, agent: str, task_id: str) -> dict[str, Any]:
    response = httpx.get(f"{server.agent(agent)}/tasks/{task_id}/claim", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def state_on(server: ServerProcess, agent: str, task_id: str) -> str:
    return rpc(server.agent(agent), "GetTask", {"id": task_id, "historyLength": 0})["result"]["status"]["state"]


@pytest.fixture
def two_replicas(pg_database: str, tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two `a2a-bridge serve` processes on one PostgreSQL database, their agents slow (a step is 2 s); A's log goes to
    tmp_path/a.log."""
    a = ServerProcess(pg_database, pace=2.0, log=tmp_path / "a.log").start()
    b = ServerProcess(pg_database, pace=2.0).start()
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


def test_a_cancel_for_a_dead_replicas_task_is_canceled_at_once_and_never_run_again(two_replicas: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = two_replicas
    reply = rpc(a.agent("test-runner"), "SendMessage", {"message": user_message(FULL_SUITE, f"dead-{uuid.uuid4()}"), "configuration": {"returnImmediately": True}})
    task_id = reply["result"]["task"]["id"]
    wait_for(lambda: state_on(b, "test-runner", task_id) == "TASK_STATE_WORKING", what="A's turn, seen from B")
    a.kill()
    started = time.monotonic()
    canceled = rpc(b.agent("test-runner"), "CancelTask", {"id": task_id})
    elapsed = time.monotonic() - started
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED", canceled
    assert elapsed < 5, f"the cancel took {elapsed:.1f} s"
    claim = claim_of(b, "test-runner", task_id)
    operations = [event["operation"] for event in claim["events"]]
    assert claim["state"] == "cancelled"
    assert operations.count("claim") == 1 and "reconcile_continue" not in operations and "resume" not in operations, operations
    assert state_on(b, "test-runner", task_id) == "TASK_STATE_CANCELED"


def test_a_replica_that_dies_in_the_agents_cancel_leaves_the_cancel_to_its_recovery(pg_database: str, tmp_path: Path) -> None:
    """A cancel sent to B: A stops its turn and calls the agent's cancel() before storing the cancel (the request B
    stored stands for it), and dies right there. B's recovery of A's claim honours the request: CANCELED with the
    request on the claim, the agent not run again, no request left."""
    notes = tmp_path / "runs.txt"
    extra, env = ["--agent", "tests.user_agents:dies_at_cancel"], {RUNS: str(notes)}
    a = ServerProcess(pg_database, extra=extra, env=env, log=tmp_path / "a.log", cwd=ROOT).start()
    b = ServerProcess(pg_database, extra=extra, env=env, cwd=ROOT).start()
    try:
        message = user_message("work", f"dies-{uuid.uuid4()}")
        reply = rpc(a.agent("dies-at-cancel"), "SendMessage", {"message": message, "configuration": {"returnImmediately": True}})
        task_id = reply["result"]["task"]["id"]
        wait_for(lambda: runs(notes, task_id) == 1, what="the agent's first run on A")
        wait_for(lambda: state_on(b, "dies-at-cancel", task_id) == "TASK_STATE_WORKING", what="A's turn, seen from B")
        canceled = rpc(b.agent("dies-at-cancel"), "CancelTask", {"id": task_id})
        assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED", canceled
        assert a.proc is not None and a.proc.wait(timeout=10) == -signal.SIGKILL, "A did not die in the agent's cancel()"
        claim = claim_of(b, "dies-at-cancel", task_id)
        operations = [event["operation"] for event in claim["events"]]
        assert claim["state"] == "cancelled", claim
        assert operations.count("request_cancel") == 1 and "reconcile_cancelled" in operations, operations
        assert "reconcile_continue" not in operations and "resume" not in operations, operations
        assert runs(notes, task_id) == 1
        assert asyncio.run(requests_left(pg_database, task_id)) == 0
    finally:
        a.stop()
        b.stop()


async def requests_left(database: str, task_id: str) -> int:
    connection = await asyncpg.connect(database)
    try:
        return await connection.fetchval("SELECT count(*) FROM bridge_requests WHERE task_id = $1", task_id)
    finally:
        await connection.close()


async def cut_session(database: str, session: int) -> int:
    """Terminate the backend that holds a session's advisory lock in this database (session numbers repeat across the
    databases other tests and benches use on the same server); returns how many were terminated."""
    connection = await asyncpg.connect(database)
    try:
        return await connection.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND objid = $2"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            SESSION_LOCKS, session,
        )
    finally:
        await connection.close()


def readiness(server: ServerProcess) -> tuple[int, dict[str, Any]]:
    response = httpx.get(f"{server.url}/readyz", timeout=5)
    return response.status_code, response.json()


def test_a_replica_that_loses_its_session_stops_and_comes_back_without_running_anything_twice(
    pg_database: str, two_replicas: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    a, b = two_replicas
    status, ready = readiness(a)
    assert status == 200 and ready["ready"]
    reply = rpc(a.agent("test-runner"), "SendMessage", {"message": user_message(FULL_SUITE, f"cut-{uuid.uuid4()}"), "configuration": {"returnImmediately": True}})
    task_id = reply["result"]["task"]["id"]
    wait_for(lambda: state_on(b, "test-runner", task_id) == "TASK_STATE_WORKING", what="A's turn, seen from B")
    assert asyncio.run(cut_session(pg_database, ready["session"])) == 1
    wait_for(lambda: readiness(a)[0] == 503, timeout=5, what="A to say it lost its session")
    wait_for(lambda: "is lost with its database connection" in (tmp_path / "a.log").read_text(), timeout=5, what="A's log line")
    back = wait_for(lambda: readiness(a)[0] == 200 and readiness(a)[1], timeout=10, what="A to take a new session")
    assert back["session"] > ready["session"]
    claim = wait_for(lambda: (c := claim_of(b, "test-runner", task_id))["claim_generation"] == 2 and c, timeout=10, what="the claim recovered")
    final = wait_for(
        lambda: (s := state_on(b, "test-runner", task_id)) in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED") and s, timeout=120, what="the recovered turn to end"
    )
    claim = claim_of(b, "test-runner", task_id)
    operations = [(event["claim_generation"], event["operation"]) for event in claim["events"]]
    assert final == "TASK_STATE_COMPLETED"
    assert operations == [(0, "create"), (1, "claim"), (1, "invalidate"), (2, "reconcile_continue"), (2, "complete")], operations
    assert claim["session_generation"] != ready["session"]
