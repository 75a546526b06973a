"""The replica part of `make bench`: two a2a-bridge processes on one PostgreSQL database (A2A_BRIDGE_PG_URL names the
server; a fresh database is created and dropped). What is measured is how fast one replica hears of the other's work,
the LISTEN/NOTIFY path: the first event of a SubscribeToTask on replica B after the agent emitted it on replica A, and
a CancelTask sent to B until A's turn has stopped (B answers CANCELED only once A stopped the turn and stored the
cancel). Each sample is bounded in time; the number of samples is the plan's."""

import asyncio
import contextlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from bench.load import sse_events
from bench.status_poll import A2A_HEADERS, HOST, START_TIMEOUT, call, free_port, http_request, stop

UNBOUNDED = ["--limit", f"max_tasks_per_minute={2**40}", "--limit", f"max_stored_bytes={2**50}"]
"""The load generator is one principal sending as fast as it can: the per-principal rate and quota are lifted."""

AGENT = "bench"
PATH = f"/{AGENT}/a2a/jsonrpc"
SAMPLE_TIMEOUT = 10.0
STREAM_TEXT = "stream 5 50"
"""Five events 50 ms apart: the subscription is open before the first one the snapshot does not hold."""
LONG_TEXT = "stream 100000 20"
"""A turn that runs until it is canceled."""
WARMUP = 3


@dataclass
class ReplicaStats:
    """Seconds from the agent's emit on A to the event's arrival through B, and from CancelTask on B to its answer."""

    first: list[float] = field(default_factory=list)
    events: list[float] = field(default_factory=list)
    stopped: list[float] = field(default_factory=list)
    """From CancelTask sent to B until A's turn had stopped."""
    cancel: list[float] = field(default_factory=list)
    """From CancelTask sent to B until B answered CANCELED (A stored the cancel, B read it)."""
    stopped_here: list[float] = field(default_factory=list)
    cancel_here: list[float] = field(default_factory=list)
    """The same two sent to A itself, the replica that runs the turn: the same work without the replica hop."""
    late: int = 0
    """Subscriptions that reached B after the task had ended (not samples)."""


async def fresh_database(server: str) -> str:
    name = f"bench_{uuid.uuid4().hex[:12]}"
    connection = await asyncpg.connect(server)
    try:
        await connection.execute(f"CREATE DATABASE {name}")
    finally:
        await connection.close()
    return server.rsplit("/", 1)[0] + f"/{name}"


async def drop_database(server: str, database: str) -> None:
    connection = await asyncpg.connect(server)
    try:
        await connection.execute(f"DROP DATABASE IF EXISTS {database.rsplit('/', 1)[1]} WITH (FORCE)")
    finally:
        await connection.close()


@contextlib.contextmanager
def replica(database: str, scratch: Path, name: str) -> Iterator[int]:
    """One `a2a-bridge serve --agent bench` process on the database; yields its port."""
    port = free_port()
    argv = [sys.executable, "-m", "a2a_bridge", "serve", "--agent", AGENT, "--store", database, "--host", HOST,
            "--port", str(port), "--log-level", "warning", *UNBOUNDED]
    with (scratch / f"replica-{name}.log").open("wb") as log:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while call_ready(port) is False:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"replica {name} did not start: {(scratch / f'replica-{name}.log').read_text()[-2000:]}")
            time.sleep(0.05)
        yield port
    finally:
        stop(process)


def call_ready(port: int) -> bool:
    with contextlib.suppress(OSError):
        return call(port, "GET", "/readyz")[0] == 200
    return False


def rpc(port: int, method: str, params: dict[str, object]) -> dict[str, object]:
    code, _, body = call(port, "POST", PATH, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, A2A_HEADERS)
    if code != 200:
        raise RuntimeError(f"{method} answered {code}: {body[:300]!r}")
    answer: dict[str, object] = json.loads(body)
    if "result" not in answer:
        raise RuntimeError(f"{method} answered {answer}")
    return answer


def start(port: int, text: str) -> str:
    """A task started on a replica without waiting for its turn; its id."""
    message = {"messageId": f"r{time.time_ns():x}", "role": "ROLE_USER", "parts": [{"text": text}]}
    answer = rpc(port, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}})
    return str(answer["result"]["task"]["id"])  # type: ignore[index]


async def subscribed(port: int, task_id: str) -> list[tuple[int, int]] | None:
    """(emit ns, arrival ns) of each event a SubscribeToTask stream brings after its snapshot, until the task ends;
    None if the task ended before the subscription (the answer is an error, not a stream)."""
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}).encode()
        writer.write(http_request("POST", PATH, port, {**A2A_HEADERS, "Accept": "text/event-stream"}, body))
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"SubscribeToTask answered {head[:200]!r}")
        if b"transfer-encoding: chunked" not in head.lower():
            return None
        events: list[tuple[int, int]] = []
        frames = 0
        async for frame, arrival in sse_events(reader):
            frames += 1
            if frames > 1 and (emitted := emit_of(frame)) is not None:
                events.append((emitted, arrival))
            if b"TASK_STATE_COMPLETED" in frame and b"statusUpdate" in frame:
                break
        return events
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def emit_of(frame: bytes) -> int | None:
    marker = frame.find(b"emit=")
    if marker < 0:
        return None
    return int(frame[marker + 5:].split(b" ", 1)[0])


def stored_on(port: int, task_id: str) -> bool:
    """Whether the replica sees the task with at least one of its events stored."""
    with contextlib.suppress(RuntimeError):
        task = rpc(port, "GetTask", {"id": task_id, "historyLength": 0})["result"]
        return bool(task.get("artifacts"))  # type: ignore[union-attr]
    return False


async def measure_replicas(server: str, samples: int, scratch: Path) -> ReplicaStats:
    stats = ReplicaStats()
    database = await fresh_database(server)
    try:
        with replica(database, scratch, "a") as a, replica(database, scratch, "b") as b:
            for number in range(WARMUP + 2 * samples):
                events = await asyncio.wait_for(subscribed(b, start(a, STREAM_TEXT)), SAMPLE_TIMEOUT)
                if events is None:
                    stats.late += 1
                elif number >= WARMUP and events:
                    stats.first.append((events[0][1] - events[0][0]) / 1e9)
                    stats.events += [(arrival - emitted) / 1e9 for emitted, arrival in events]
                if len(stats.first) == samples:
                    break
            for number in range(WARMUP + samples):
                for target, stopped, answered in ((b, stats.stopped, stats.cancel), (a, stats.stopped_here, stats.cancel_here)):
                    until_stopped, until_answered = await canceled(a, b, target)
                    if number >= WARMUP:
                        stopped.append(until_stopped)
                        answered.append(until_answered)
    finally:
        await drop_database(server, database)
    return stats


async def canceled(a: int, b: int, target: int) -> tuple[float, float]:
    """For a turn running on A that B sees, seconds from a CancelTask sent to `target` until A's turn had stopped
    (the time the agent names in its CANCELED status), and until the answer CANCELED."""
    task_id = start(a, LONG_TEXT)
    deadline = time.monotonic() + SAMPLE_TIMEOUT
    while not stored_on(b, task_id):
        if time.monotonic() > deadline:
            raise RuntimeError(f"replica B never saw task {task_id}")
        await asyncio.sleep(0.01)
    sent, began = time.time_ns(), time.perf_counter()
    answer = rpc(target, "CancelTask", {"id": task_id})
    took = time.perf_counter() - began
    status = answer["result"]["status"]  # type: ignore[index]
    if status["state"] != "TASK_STATE_CANCELED":
        raise RuntimeError(f"CancelTask answered {status['state']}")
    stopped = int(status["message"]["parts"][0]["text"].removeprefix("stopped="))
    return (stopped - sent) / 1e9, took


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def replicas_table(stats: ReplicaStats) -> list[str]:
    def row(label: str, values: list[float]) -> str:
        return f"| {label} | {len(values)} | {percentile(values, 0.5) * 1000:.2f} | {percentile(values, 0.99) * 1000:.2f} |"

    return [
        "| measure | samples | p50 ms | p99 ms |",
        "|---|---:|---:|---:|",
        row("SubscribeToTask on B: first event after A's agent emits it", stats.first),
        row("SubscribeToTask on B: every event after A's agent emits it", stats.events),
        row("CancelTask on B until A's turn has stopped", stats.stopped),
        row("CancelTask on B until B answers CANCELED (stored by A, read by B)", stats.cancel),
        row("CancelTask on A itself until its turn has stopped (no replica hop, for comparison)", stats.stopped_here),
        row("CancelTask on A itself until it answers CANCELED (for comparison)", stats.cancel_here),
        "",
        f"{stats.late} subscriptions reached B after their task had ended and are not samples.",
    ]


def replicas_acceptance(stats: ReplicaStats) -> list[tuple[str, bool]]:
    first, cancel = percentile(stats.first, 0.5) * 1000, percentile(stats.stopped, 0.5) * 1000
    return [
        (f"replicas: first event on B p50 {first:.2f} ms after A's agent emits it (bar ≤ 10 ms)", first <= 10),
        (f"replicas: CancelTask on B p50 {cancel:.2f} ms until A's turn has stopped (bar ≤ 10 ms)", cancel <= 10),
    ]
