"""`make bench`: a2a-bridge side by side with the stock a2a-sdk server, @a2a-js/sdk's server and a bare Starlette echo.

Each server runs the same trivial agent (agents/bench.py; interop/js/bench-server.mjs for Node) on 127.0.0.1, one at
a time, pinned to core 0 with taskset while this client runs on core 1 (the timed load runs by wrk where it is
installed, bench/wrk.py, else by the Python client, bench/load.py; the client's CPU is reported beside the
server's); the servers are interleaved and the rounds repeated, and the table of medians (with ratios against the
stock SDK measured in the same command) is printed and written into docs/PERFORMANCE.md. Every run is bounded by a
request count and a time limit.
"""

import argparse
import asyncio
import contextlib
import functools
import importlib.metadata
import importlib.util
import json
import os
import platform
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.load import RequestFor, drive, event_loop_factory, sse_events
from bench.wrk import PLACEHOLDER
from bench import postgres, wrk
from bench.populate import clone_tasks
from bench.replicas import UNBOUNDED, WARMUP, ReplicaStats, measure_replicas, replicas_acceptance, replicas_table
from bench.status_poll import (
    A2A_HEADERS,
    CLIENT_CORE,
    HOST,
    SERVER_CORE,
    START_TIMEOUT,
    Load,
    Run,
    call,
    cpu_seconds,
    finished_task,
    free_port,
    http_request,
    requests_for,
    stop,
    two_cores,
)

ROOT = Path(__file__).resolve().parents[1]
JS_DIR = ROOT / "interop" / "js"
PERFORMANCE = ROOT / "docs" / "PERFORMANCE.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
REPLICAS_BEGIN, REPLICAS_END = "<!-- bench:replicas:begin -->", "<!-- bench:replicas:end -->"
"""The replica section has its own markers, so `--only replicas` rewrites it alone."""
AGENT = "bench"
SETTLE = 1.0
"""Seconds a server is left idle before its RSS is read."""
STREAM_TIMEOUT = 30.0
LIST_PAGE = 50
MAX_REQUESTS = 1_000_000
"""The request cap of one timed run (runs end on their time limit well before it)."""
CONTENDED = 0.10
"""A load run whose server or client waited this share of it for a CPU (other processes on the machine) is run again
once, and the calmer of the two kept."""
COMPLETED = b'"TASK_STATE_COMPLETED"'
INPUT_REQUIRED = b'"TASK_STATE_INPUT_REQUIRED"'
EMIT = re.compile(rb"emit=(\d+) seq=(\d+)")
TASK_ID = re.compile(rb'"task":\s*\{"id":\s*"([^"]+)"')
PG_URL = "A2A_BRIDGE_PG_URL"
WRK = wrk.installed()
"""Whether the timed load runs go through wrk (bench/wrk.py) rather than the Python client (bench/load.py)."""
PINNED = two_cores() and shutil.which("taskset") is not None
"""Whether servers run on core 0 and the client on core 1; decided before the client pins itself."""


@dataclass(frozen=True)
class Plan:
    """How much `make bench` measures; `QUICK` is `make bench-quick`."""

    rounds: int = 3
    seconds: float = 10.0
    """Each timed load run: 10 s, as issue 18's reference runs (rounds of 3 s swung a server's req/s up to 1.8× from
    one round to the next on this shared machine)."""
    warmup: float = 1.0
    connections: int = 32
    streams: int = 20
    """Paced streams per server and round, for the event latency."""
    stream_events: int = 20
    stream_gap_ms: float = 2.0
    burst_events: int = 2_000
    """Events of the one back-to-back stream, for events/s."""
    latency_requests: int = 500
    latency_seconds: float = 5.0
    small_store: int = 1_000
    rss_store: int = 10_000
    large_store: int = 100_000
    idle_tasks: int = 10_000
    fill_seconds: float = 240.0
    """The cap on serving SendMessages into the SQLite store; what it misses of `large_store` is inserted directly."""
    idle_seconds: float = 90.0
    """The cap on each fill of the RSS measures of idle tasks."""
    replica_samples: int = 100
    """Samples of each replica measure (bench/replicas.py), where A2A_BRIDGE_PG_URL names a PostgreSQL server."""


QUICK = Plan(
    rounds=1, seconds=2.0, warmup=0.5, streams=10, burst_events=1_000, latency_requests=200, latency_seconds=3.0,
    rss_store=2_000, large_store=20_000, idle_tasks=2_000, fill_seconds=60.0, idle_seconds=30.0, replica_samples=30,
)


@dataclass(frozen=True)
class Server:
    """One server under test: how to start it on a port, and where its JSON-RPC endpoint is."""

    key: str
    label: str
    runtime: str
    argv: Callable[[int, Path | None], list[str]]
    """The command for a port and, for a SQLite server, the fresh file it stores its tasks in."""
    path: str = "/a2a/jsonrpc"
    needle: bytes = COMPLETED
    cwd: Path = ROOT
    sqlite: bool = False


@dataclass
class Started:
    process: "subprocess.Popen[bytes]"
    port: int
    server: Server
    database: Path | None

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class StreamStats:
    """What the streams of one server and round showed (seconds, and events per second)."""

    first: list[float] = field(default_factory=list)
    events: list[float] = field(default_factory=list)
    early: int = 0
    """Events (all but each stream's last) that arrived before the agent emitted its last event."""
    comparable: int = 0
    burst_rate: float = 0.0
    burst_early: bool = False


@dataclass
class Scale:
    """The SQLite store at its sizes: request latencies and the server's RSS, by number of finished tasks."""

    get_task: dict[int, Run] = field(default_factory=dict)
    list_tasks: dict[int, Run] = field(default_factory=dict)
    rss: dict[int, int] = field(default_factory=dict)
    """RSS by the number of tasks the server itself finished."""
    served: int = 0
    unexpected: int = 0
    inserted: int = 0
    """Tasks copied into the file directly (bench/populate.py) once the fill's time ran out."""
    fill_rate: float = 0.0


@dataclass
class Results:
    send: dict[str, list[Run]] = field(default_factory=dict)
    reads: dict[str, list[Run]] = field(default_factory=dict)
    streams: dict[str, list[StreamStats]] = field(default_factory=dict)
    scale: Scale = field(default_factory=Scale)
    rss: dict[str, int] = field(default_factory=dict)


def python_runtime(loop: str) -> str:
    """Which Python runs a server (this one), and on which event loop and HTTP parser."""
    executable = Path(sys.executable)
    shown = executable.relative_to(ROOT) if executable.is_relative_to(ROOT) else executable
    return f"CPython {platform.python_version()} ({shown}), {loop}"


def auto_loop() -> str:
    """What uvicorn's "auto" loop and HTTP settings pick in this environment."""
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    return f"uvicorn auto: {loop} + {http}"


def uvicorn_argv(factory: str, *options: str) -> Callable[[int, Path | None], list[str]]:
    def argv(port: int, _database: Path | None) -> list[str]:
        return [sys.executable, "-m", "uvicorn", "--factory", factory, "--host", HOST, "--port", str(port),
                "--log-level", "warning", "--no-access-log", *options]

    return argv


def bridge_argv(port: int, database: Path | None) -> list[str]:
    store = "memory" if database is None else f"sqlite:///{database}"
    return [sys.executable, "-m", "a2a_bridge", "serve", "--agent", AGENT, "--store", store, "--host", HOST,
            "--port", str(port), "--log-level", "warning", *UNBOUNDED]


def node_version() -> str | None:
    """Node's version where node and interop/js's packages are installed."""
    node = shutil.which("node")
    if node is None or not (JS_DIR / "node_modules" / "@a2a-js" / "sdk").is_dir():
        return None
    return subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10, check=True).stdout.strip()


def servers(bridge_root: Path = ROOT) -> list[Server]:
    """Every server, the stock SDK first (the ratios' base); @a2a-js/sdk only where Node and its packages are; the
    bridge from `bridge_root` (another source tree of it, such as an exported older commit, to compare with)."""
    bridge_runtime = python_runtime(auto_loop()) + ("" if bridge_root == ROOT else f", bridge from {bridge_root}")
    listed = [
        Server("stock", "stock a2a-sdk 1.3 (memory)", python_runtime(auto_loop()), uvicorn_argv("bench.servers:stock_app")),
    ]
    node = node_version()
    if node is not None:
        listed.append(Server(
            "js", f"@a2a-js/sdk {js_sdk_version()} (memory)", f"Node {node}, express",
            lambda port, _database: ["node", "bench-server.mjs", str(port)], cwd=JS_DIR,
        ))
    listed += [
        Server("echo-h11", "bare Starlette echo, h11", python_runtime("asyncio + h11"),
               uvicorn_argv("bench.servers:echo_app", "--loop", "asyncio", "--http", "h11"), needle=b'"messageId"'),
        Server("echo-fast", "bare Starlette echo, uvloop + httptools", python_runtime("uvloop + httptools"),
               uvicorn_argv("bench.servers:echo_app", "--loop", "uvloop", "--http", "httptools"), needle=b'"messageId"'),
        Server("bridge-memory", "a2a-bridge (memory)", bridge_runtime, bridge_argv, path=f"/{AGENT}/a2a/jsonrpc",
               cwd=bridge_root),
        Server("bridge-sqlite", "a2a-bridge (SQLite, fresh file)", bridge_runtime, bridge_argv,
               path=f"/{AGENT}/a2a/jsonrpc", cwd=bridge_root, sqlite=True),
    ]
    return listed


def js_sdk_version() -> str:
    package = JS_DIR / "node_modules" / "@a2a-js" / "sdk" / "package.json"
    return str(json.loads(package.read_text())["version"])


@contextlib.contextmanager
def running(server: Server, scratch: Path) -> Iterator[Started]:
    """The server on a free loopback port (on core 0 where the machine has two), stopped on exit."""
    port = free_port()
    database = scratch / f"{server.key}-{time.time_ns()}.db" if server.sqlite else None
    argv = server.argv(port, database)
    if PINNED:
        argv = ["taskset", "-c", str(SERVER_CORE), *argv]
    log = scratch / f"{server.key}.log"
    with log.open("wb") as errors:
        process = subprocess.Popen(argv, cwd=server.cwd, stdout=subprocess.DEVNULL, stderr=errors)
    try:
        wait_listening(server.label, port, process, log)
        yield Started(process, port, server, database)
    finally:
        stop(process)


def wait_listening(label: str, port: int, process: "subprocess.Popen[bytes]", log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{label} exited with {process.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{label} did not listen on port {port} within {START_TIMEOUT} s")


def rss_bytes(pid: int) -> int:
    """The resident set size of a process, from /proc (0 where /proc is absent)."""
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        return 0
    for line in status.read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def message_body(method: str, text: str, message_id: str, configuration: dict[str, object] | None = None) -> dict[str, object]:
    message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
    params: dict[str, object] = {"message": message}
    if configuration is not None:
        params["configuration"] = configuration
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def send_request(started: Started, text: str = "hello", configuration: dict[str, object] | None = None) -> bytes:
    """A SendMessage request whose messageId ends in PLACEHOLDER, numbered anew each time it is sent (the bridge
    answers a repeated messageId as a retry); the run's tag keeps the ids of two runs apart."""
    tag = f"b{time.time_ns():x}-"
    body = json.dumps(message_body("SendMessage", text, tag + PLACEHOLDER, configuration)).encode()
    return http_request("POST", started.server.path, started.port, A2A_HEADERS, body)


def numbered(request: bytes) -> RequestFor:
    """The Python client's requests: PLACEHOLDER (where the request holds it) replaced by each request's index."""
    if PLACEHOLDER.encode() not in request:
        return repeat(request)
    before, after = request.split(PLACEHOLDER.encode())
    return lambda index: b"%s%010d%s" % (before, index, after)


async def load_run(name: str, started: Started, request: bytes, expected: int, load: Load, needle: bytes = b"") -> Run:
    """One timed load run against a server: through wrk where it is installed, else the Python client."""
    if WRK:
        return await wrk.drive(name, started.port, request, expected, load, started.pid, needle)
    return await drive(name, started.port, numbered(request), expected, load, started.pid, needle)


def repeat(request: bytes) -> RequestFor:
    """The same request at every index."""
    return lambda _index: request


def cycle(requests: list[bytes]) -> RequestFor:
    """The requests in turn, over and over."""
    return lambda index: requests[index % len(requests)]


def rpc_request(started: Started, method: str, params: dict[str, object]) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    return http_request("POST", started.server.path, started.port, A2A_HEADERS, body)


def checked_send(started: Started, text: str = "hello", configuration: dict[str, object] | None = None) -> dict[str, Any]:
    """One SendMessage through the standard library, checked before a server is measured."""
    code, _, body = call(started.port, "POST", started.server.path,
                         message_body("SendMessage", text, f"check-{time.time_ns()}", configuration), A2A_HEADERS)
    if code != 200 or started.server.needle not in body:
        raise RuntimeError(f"{started.server.label} answered {code}: {body[:300]!r}")
    answer: dict[str, Any] = json.loads(body)
    return answer


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def waited(run: Run) -> float:
    return max(run.server_wait, run.client_wait)


async def steady(measure: Callable[[], Awaitable[Run]]) -> Run:
    """A load run, run again once if the machine's other processes took the CPU from it (see CONTENDED)."""
    first = await measure()
    if waited(first) <= CONTENDED:
        return first
    return min(first, await measure(), key=waited)


def summary(run: Run) -> str:
    return (f"{run.rate:,.0f} req/s, p99 {run.percentile(0.99) * 1000:.1f} ms, server CPU {run.server_cpu:.0%} "
            f"(waited {run.server_wait:.0%}), client CPU {run.client_cpu:.0%} (waited {run.client_wait:.0%})")


async def measure_send(started: Started, plan: Plan) -> Run:
    load = Load(plan.connections, MAX_REQUESTS, plan.seconds)
    checked_send(started)
    await load_run("warmup", started, send_request(started), 200, replace(load, seconds=plan.warmup))
    run = await steady(lambda: load_run("SendMessage", started, send_request(started), 200, load, started.server.needle))
    progress(f"  {started.server.label}: SendMessage {summary(run)}")
    return run


async def measure_reads(started: Started, plan: Plan) -> dict[str, Run]:
    """GetTask on a finished task, and (the bridge) the 304 Task Status poll on it."""
    load = Load(plan.connections, MAX_REQUESTS, plan.seconds)
    warmup = replace(load, seconds=plan.warmup)
    requests: dict[str, tuple[bytes, int]] = {}
    if started.server.key == "stock":
        task_id = checked_send(started)["result"]["task"]["id"]
        requests["GetTask"] = (rpc_request(started, "GetTask", {"id": task_id}), 200)
    else:
        task_id, etag = finished_task(started.port, AGENT)
        for name, pair in requests_for(started.port, task_id, etag, AGENT).items():
            requests["GetTask" if name.startswith("GetTask") else "304 poll"] = pair
    runs = {}
    for name, (request, status) in requests.items():
        needle = COMPLETED if status == 200 else b""
        await load_run("warmup", started, request, status, warmup)
        runs[name] = await steady(functools.partial(load_run, name, started, request, status, load, needle))
        progress(f"  {started.server.label}: {name} {summary(runs[name])}")
    return runs


async def stream_events(started: Started, text: str) -> list[tuple[int, int, int]]:
    """(seq, emit ns, arrival ns) of each artifact event of one SendStreamingMessage, read as it arrives."""
    reader, writer = await asyncio.open_connection(HOST, started.port)
    try:
        body = json.dumps(message_body("SendStreamingMessage", text, f"s{time.time_ns():x}")).encode()
        headers = {**A2A_HEADERS, "Accept": "text/event-stream"}
        writer.write(http_request("POST", started.server.path, started.port, headers, body))
        head = (await reader.readuntil(b"\r\n\r\n")).lower()
        if b" 200 " not in head.split(b"\r\n", 1)[0] or b"transfer-encoding: chunked" not in head:
            raise RuntimeError(f"{started.server.label} did not stream: {head[:300]!r}")
        events: list[tuple[int, int, int]] = []
        async for event, arrival in sse_events(reader):
            if (match := EMIT.search(event)) is not None:
                events.append((int(match.group(2)), int(match.group(1)), arrival))
            elif b"statusUpdate" in event and COMPLETED in event:
                break
        return events
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def measure_streams(started: Started, plan: Plan) -> StreamStats:
    """Paced streams for the latency from emit to arrival; one back-to-back stream for events per second."""
    stats = StreamStats()
    paced = f"stream {plan.stream_events} {plan.stream_gap_ms:g}"
    await asyncio.wait_for(stream_events(started, paced), STREAM_TIMEOUT)
    for _ in range(plan.streams):
        events = await asyncio.wait_for(stream_events(started, paced), STREAM_TIMEOUT)
        if len(events) != plan.stream_events:
            raise RuntimeError(f"{started.server.label} streamed {len(events)} of {plan.stream_events} events")
        stats.first.append((events[0][2] - events[0][1]) / 1e9)
        stats.events += [(arrival - emit) / 1e9 for _, emit, arrival in events]
        last_emit = max(emit for _, emit, _ in events)
        stats.early += sum(1 for _, emit, arrival in events if emit != last_emit and arrival < last_emit)
        stats.comparable += len(events) - 1
    burst = await asyncio.wait_for(stream_events(started, f"stream {plan.burst_events} 0"), STREAM_TIMEOUT)
    if len(burst) != plan.burst_events:
        raise RuntimeError(f"{started.server.label} streamed {len(burst)} of {plan.burst_events} events")
    first_emit, last_emit = burst[0][1], max(emit for _, emit, _ in burst)
    stats.burst_rate = len(burst) / ((burst[-1][2] - first_emit) / 1e9)
    stats.burst_early = burst[0][2] < last_emit
    progress(f"  {started.server.label}: first event p50 {percentile(stats.first, 0.5) * 1000:.2f} ms, "
             f"{stats.burst_rate:,.0f} events/s on one stream")
    return stats


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


async def one_round(
    number: int, plan: Plan, listed: list[Server], scratch: Path, results: Results, sends_only: bool = False
) -> None:
    """Every server once, in an order rotated each round (`sends_only`: the blocking SendMessage run alone)."""
    order = listed[number % len(listed):] + listed[:number % len(listed)]
    progress(f"round {number + 1}/{plan.rounds}")
    for server in order:
        with running(server, scratch) as started:
            results.send.setdefault(server.key, []).append(await measure_send(started, plan))
            if server.key in ("stock", "bridge-memory") and not sends_only:
                for name, run in (await measure_reads(started, plan)).items():
                    results.reads.setdefault(f"{server.key} {name}", []).append(run)
                results.streams.setdefault(server.key, []).append(await measure_streams(started, plan))


async def fill(started: Started, count: int, seconds: float, text: str, needle: bytes, ids: list[str] | None = None) -> Run:
    """Up to `count` SendMessages at full concurrency within `seconds`; keeps each new task's id in `ids`."""

    def keep(_index: int, body: bytes) -> None:
        if ids is not None and (match := TASK_ID.search(body)) is not None:
            ids.append(match.group(1).decode())

    load = Load(requests=count, seconds=max(0.1, seconds))
    return await drive("fill", started.port, numbered(send_request(started, text)), 200, load, started.pid, needle, keep)


async def latency(started: Started, request_for: RequestFor, needle: bytes, plan: Plan) -> Run:
    """One request at a time, so the time is the server's answer to one request."""
    load = Load(1, plan.latency_requests, plan.latency_seconds)
    await drive("warmup", started.port, request_for, 200, replace(load, requests=20))
    return await drive("latency", started.port, request_for, 200, load, started.pid, needle)


async def measure_scale(plan: Plan, bridge: Server, scratch: Path) -> Scale:
    """Fill a fresh SQLite store through the bridge, pausing at each size for RSS and latencies; whatever the fill's
    time cap leaves of a size is copied in directly (the latencies then still see that many stored tasks)."""
    scale = Scale()
    ids: list[str] = []
    sizes = sorted({plan.small_store, plan.rss_store, plan.large_store})
    progress(f"stored tasks: filling a fresh SQLite store up to {plan.large_store:,} tasks")
    with running(bridge, scratch) as started:
        assert started.database is not None
        template = str(checked_send(started)["result"]["task"]["id"])
        deadline = time.monotonic() + plan.fill_seconds
        began = time.monotonic()
        scale.served = 1
        capped = False
        for size in sizes:
            if not capped:
                run = await fill(started, size - scale.served, deadline - time.monotonic(), "hello", COMPLETED, ids)
                scale.served += run.completed - run.unexpected
                scale.unexpected += run.unexpected
                scale.fill_rate = (scale.served - 1) / (time.monotonic() - began)
                capped = scale.served < size
                await asyncio.sleep(SETTLE)
                scale.rss[scale.served] = rss_bytes(started.pid)
                progress(f"  {scale.served:,} tasks served: RSS {scale.rss[scale.served] / 2**20:.0f} MiB")
                if capped:
                    progress(f"  the {plan.fill_seconds:g} s fill served {scale.served:,} tasks; copying in the rest")
            stored = scale.served + scale.inserted
            if stored < size:
                ids += clone_tasks(started.database, template, size - stored)
                scale.inserted += size - stored
            if size in (plan.small_store, plan.large_store):
                sample = random.Random(size).sample(ids, min(len(ids), 1_000))
                gets = [rpc_request(started, "GetTask", {"id": task_id}) for task_id in sample]
                scale.get_task[size] = await latency(started, cycle(gets), COMPLETED, plan)
                listing = rpc_request(started, "ListTasks", {"pageSize": LIST_PAGE})
                scale.list_tasks[size] = await latency(started, repeat(listing), b'"tasks"', plan)
                progress(f"  {size:,} tasks: GetTask p50 {scale.get_task[size].percentile(0.5) * 1000:.2f} ms, "
                         f"ListTasks p50 {scale.list_tasks[size].percentile(0.5) * 1000:.2f} ms")
    return scale


async def measure_idle(plan: Plan, listed: list[Server], scratch: Path) -> dict[str, int]:
    """RSS of the bridge (SQLite) after tasks left idle in INPUT_REQUIRED; of the stock SDK after finished, then idle."""
    rss: dict[str, int] = {}
    bridge = next(s for s in listed if s.key == "bridge-sqlite")
    stock = next(s for s in listed if s.key == "stock")
    seconds = plan.idle_seconds
    progress(f"idle tasks: {plan.idle_tasks:,} left in INPUT_REQUIRED")
    with running(bridge, scratch) as started:
        await asyncio.sleep(SETTLE)
        rss["bridge start"] = rss_bytes(started.pid)
        run = await fill(started, plan.idle_tasks, seconds, "ask", INPUT_REQUIRED)
        await asyncio.sleep(SETTLE)
        rss["bridge idle"] = rss_bytes(started.pid)
        rss["bridge idle tasks"] = run.completed - run.unexpected
    memory = next(s for s in listed if s.key == "bridge-memory")
    progress(f"finished tasks in memory: the bridge and the stock SDK, {plan.idle_tasks:,} tasks twice")
    with running(memory, scratch) as started:
        await asyncio.sleep(SETTLE)
        rss["memory start"] = rss_bytes(started.pid)
        for half in ("memory half", "memory full"):
            run = await fill(started, plan.idle_tasks, seconds, "hello", COMPLETED)
            await asyncio.sleep(SETTLE)
            rss[half], rss[f"{half} tasks"] = rss_bytes(started.pid), run.completed - run.unexpected
    with running(stock, scratch) as started:
        await asyncio.sleep(SETTLE)
        rss["stock start"] = rss_bytes(started.pid)
        run = await fill(started, plan.idle_tasks, seconds, "hello", COMPLETED)
        await asyncio.sleep(SETTLE)
        rss["stock finished"] = rss_bytes(started.pid)
        rss["stock finished tasks"] = run.completed - run.unexpected
        run = await fill(started, plan.idle_tasks, seconds, "ask", INPUT_REQUIRED)
        await asyncio.sleep(SETTLE)
        rss["stock idle"] = rss_bytes(started.pid)
        rss["stock idle tasks"] = run.completed - run.unexpected
    progress(f"  per finished task in memory: bridge {per_task(rss, 'memory')[0]:,.0f} bytes, "
             f"stock {per_task(rss, 'stock')[0]:,.0f} bytes")
    progress(f"  bridge {rss['bridge idle'] / 2**20:.0f} MiB after {rss['bridge idle tasks']:,} idle tasks; "
             f"stock {rss['stock idle'] / 2**20:.0f} MiB")
    return rss


async def measure_all(plan: Plan, listed: list[Server], scratch: Path) -> Results:
    results = Results()
    for number in range(plan.rounds):
        await one_round(number, plan, listed, scratch, results)
    results.scale = await measure_scale(plan, next(s for s in listed if s.key == "bridge-sqlite"), scratch)
    results.rss = await measure_idle(plan, listed, scratch)
    return results


async def measure_send_section(plan: Plan, listed: list[Server], scratch: Path) -> Results:
    """`--only send`: the blocking SendMessage rounds alone, every server interleaved as in the full run."""
    results = Results()
    for number in range(plan.rounds):
        await one_round(number, plan, listed, scratch, results, sends_only=True)
    return results


def median_rate(runs: list[Run]) -> float:
    return statistics.median(run.rate for run in runs)


def median_p99_ms(runs: list[Run]) -> float:
    return statistics.median(run.percentile(0.99) for run in runs) * 1000


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}×" if base else "n/a"


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def versions() -> str:
    names = ("a2a-sdk", "starlette", "uvicorn", "uvloop", "httptools", "SQLAlchemy", "aiosqlite")
    found = []
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found.append(f"{name} {importlib.metadata.version(name)}")
    return ", ".join(found)


def cpu(runs: list[Run], side: str) -> str:
    """Median share of a core used, and of the run spent waiting for one, by the server or the client."""
    used = statistics.median(getattr(run, f"{side}_cpu") for run in runs)
    wait = statistics.median(getattr(run, f"{side}_wait") for run in runs)
    return f"{used:.0%} ({wait:.0%})"


def send_table(results: Results, listed: list[Server]) -> list[str]:
    base = median_rate(results.send["stock"])
    lines = [
        "| server | runs on | req/s | p99 ms | vs stock | server CPU (waited) | client CPU (waited) | req/s per round "
        "| unexpected |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for server in listed:
        runs = results.send[server.key]
        rate = median_rate(runs)
        lines.append(
            f"| {server.label} | {server.runtime} | {rate:,.0f} | {median_p99_ms(runs):.1f} | {ratio(rate, base)} "
            f"| {cpu(runs, 'server')} | {cpu(runs, 'client')} "
            f"| {', '.join(f'{r.rate:,.0f}' for r in runs)} | {sum(r.unexpected for r in runs)} |"
        )
    return lines


def reads_table(results: Results) -> list[str]:
    base = median_rate(results.reads["stock GetTask"])
    own = median_rate(results.send["bridge-memory"])
    labels = {"stock GetTask": "stock a2a-sdk: GetTask", "bridge-memory GetTask": "a2a-bridge (memory): GetTask",
              "bridge-memory 304 poll": "a2a-bridge (memory): Task Status poll answered 304"}
    lines = [
        "| request | req/s | p99 ms | vs stock GetTask | vs the bridge's SendMessage | server CPU (waited) "
        "| req/s per round | unexpected |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for key, label in labels.items():
        runs = results.reads[key]
        rate = median_rate(runs)
        lines.append(
            f"| {label} | {rate:,.0f} | {median_p99_ms(runs):.1f} | {ratio(rate, base)} | {ratio(rate, own)} "
            f"| {cpu(runs, 'server')} | {', '.join(f'{r.rate:,.0f}' for r in runs)} | {sum(r.unexpected for r in runs)} |"
        )
    return lines


def streams_table(results: Results, listed: list[Server]) -> list[str]:
    labels = {server.key: server.label for server in listed}
    base = statistics.median(s.burst_rate for s in results.streams["stock"])
    lines = [
        "| server | first event p50 / p99 ms | every event p50 / p99 ms | paced events read before the agent's last emit "
        "| events/s on one stream | vs stock | back-to-back: first event read before the last emit | events/s per round |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for key in ("stock", "bridge-memory"):
        stats = results.streams[key]
        first = [value for s in stats for value in s.first]
        every = [value for s in stats for value in s.events]
        early = sum(s.early for s in stats) / max(1, sum(s.comparable for s in stats))
        rate = statistics.median(s.burst_rate for s in stats)
        burst_early = "yes" if all(s.burst_early for s in stats) else "no"
        lines.append(
            f"| {labels[key]} | {percentile(first, 0.5) * 1000:.2f} / {percentile(first, 0.99) * 1000:.2f} "
            f"| {percentile(every, 0.5) * 1000:.2f} / {percentile(every, 0.99) * 1000:.2f} "
            f"| {early:.0%} | {rate:,.0f} | {ratio(rate, base)} | {burst_early} "
            f"| {', '.join(f'{s.burst_rate:,.0f}' for s in stats)} |"
        )
    return lines


def scale_table(scale: Scale, plan: Plan) -> list[str]:
    small, large = plan.small_store, plan.large_store
    lines = [
        f"| request (one at a time) | p50 ms at {small:,} | p99 ms at {small:,} | p50 ms at {large:,} "
        f"| p99 ms at {large:,} | {large:,} / {small:,} (p50) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, runs in (("GetTask (random stored task)", scale.get_task),
                        (f"ListTasks (first page of {LIST_PAGE})", scale.list_tasks)):
        cells = []
        for size in (small, large):
            run = runs.get(size)
            cells += [f"{run.percentile(0.5) * 1000:.2f}", f"{run.percentile(0.99) * 1000:.2f}"] if run else ["n/a"] * 2
        both = small in runs and large in runs
        change = ratio(runs[large].percentile(0.5), runs[small].percentile(0.5)) if both else "n/a"
        lines.append(f"| {label} | {' | '.join(cells)} | {change} |")
    return lines


def mib(value: int) -> str:
    return f"{value / 2**20:.0f}"


def rss_table(results: Results, plan: Plan) -> list[str]:
    scale, rss = results.scale, results.rss
    lines = ["| server | after | RSS MiB |", "|---|---|---:|"]
    lines.append(f"| a2a-bridge (SQLite) | start (no task) | {mib(rss['bridge start'])} |")
    for size, value in sorted(scale.rss.items()):
        lines.append(f"| a2a-bridge (SQLite) | {size:,} tasks it finished | {mib(value)} |")
    lines.append(f"| a2a-bridge (SQLite), fresh process | {rss['bridge idle tasks']:,} tasks idle in INPUT_REQUIRED "
                 f"| {mib(rss['bridge idle'])} |")
    first, second = per_task(rss, "memory")
    lines.append(f"| a2a-bridge (memory) | start (no task) | {mib(rss['memory start'])} |")
    lines.append(f"| a2a-bridge (memory) | {rss['memory half tasks']:,} finished tasks ({first:,.0f} bytes each) "
                 f"| {mib(rss['memory half'])} |")
    lines.append(f"| a2a-bridge (memory) | then {rss['memory full tasks']:,} more finished tasks ({second:,.0f} bytes "
                 f"each) | {mib(rss['memory full'])} |")
    lines.append(f"| stock a2a-sdk (memory) | start (no task) | {mib(rss['stock start'])} |")
    lines.append(f"| stock a2a-sdk (memory) | {rss['stock finished tasks']:,} finished tasks "
                 f"({per_task(rss, 'stock')[0]:,.0f} bytes each) | {mib(rss['stock finished'])} |")
    lines.append(f"| stock a2a-sdk (memory) | then {rss['stock idle tasks']:,} tasks idle in INPUT_REQUIRED "
                 f"| {mib(rss['stock idle'])} |")
    return lines


def per_task(rss: dict[str, int], server: str) -> tuple[float, float]:
    """RSS bytes per finished task of a memory store: over the first fill, and (the bridge) over the second."""
    if server == "stock":
        return (rss["stock finished"] - rss["stock start"]) / max(1, rss["stock finished tasks"]), 0.0
    first = (rss["memory half"] - rss["memory start"]) / max(1, rss["memory half tasks"])
    return first, (rss["memory full"] - rss["memory half"]) / max(1, rss["memory full tasks"])


def acceptance(results: Results, plan: Plan) -> list[tuple[str, bool | None]]:
    """Each ratio of issues 7 and 18 with whether it holds (None: reported, no bar)."""
    send = {key: median_rate(runs) for key, runs in results.send.items()}
    stock, bridge, sqlite = send["stock"], send["bridge-memory"], send["bridge-sqlite"]
    poll = median_rate(results.reads["bridge-memory 304 poll"])
    first = percentile([v for s in results.streams["bridge-memory"] for v in s.first], 0.5) * 1000
    checks: list[tuple[str, bool | None]] = [
        (f"blocking SendMessage, memory: a2a-bridge {bridge / stock:.2f}× the stock SDK (bar ≥ 3×)", bridge >= 3 * stock),
        (f"blocking SendMessage, SQLite: a2a-bridge {sqlite / stock:.2f}× the stock SDK on memory (bar ≥ 1.5×)",
         sqlite >= 1.5 * stock),
        (f"304 Task Status poll {poll / bridge:.2f}× the bridge's blocking SendMessage (bar ≥ 5×)", poll >= 5 * bridge),
        (f"streaming first event p50 {first:.2f} ms after the agent emits it (bar ≤ 5 ms)", first <= 5),
    ]
    scale, small, large = results.scale, plan.small_store, plan.large_store
    growth = scale.get_task[large].percentile(0.5) / scale.get_task[small].percentile(0.5)
    checks.append((f"GetTask p50 with {large:,} stored tasks {growth:.2f}× the time with {small:,}, timed minutes "
                   "apart as the store filled (no bar here: the reads section times the two sizes side by side, "
                   "bar ≤ 1.2×)", None))
    if plan.rss_store in scale.rss and large in scale.rss:
        growth = scale.rss[large] / scale.rss[plan.rss_store]
        checks.append((f"RSS after {large:,} finished tasks (SQLite) {growth:.2f}× the RSS after {plan.rss_store:,} "
                       "(bar ≤ 1.2×)", growth <= 1.2))
    else:
        checks.append((f"RSS after {large:,} finished tasks: not measured, the bridge served {scale.served:,} tasks "
                       f"within the fill's {plan.fill_seconds:g} s", False))
    if "js" in send:
        js = send["js"]
        checks.append((f"blocking SendMessage, memory: a2a-bridge {bridge / js:.2f}× @a2a-js/sdk (issue 18: bar ≥ 1.0×)",
                       bridge >= js))
        checks.append((f"blocking SendMessage, SQLite: a2a-bridge {sqlite / js:.2f}× @a2a-js/sdk in memory "
                       "(issue 18: bar ≥ 0.5×)", sqlite >= 0.5 * js))
    first, second = per_task(results.rss, "memory")
    stock_each = per_task(results.rss, "stock")[0]
    checks.append((f"RSS per finished task, memory store: a2a-bridge {first:,.0f} bytes, then {second:,.0f} bytes "
                   f"(flat: second ≤ 1.2× first); the stock SDK {stock_each:,.0f} bytes (issue 18: bar ≤ the stock "
                   "SDK's)", max(first, second) <= stock_each and second <= 1.2 * max(first, 1.0)))
    return checks


ISSUE_35_BARS = {"bridge-memory": ("memory", 1.5), "bridge-sqlite": ("SQLite", 0.8)}
"""Issue 35: SendMessage at this share of @a2a-js/sdk's rate (in memory), in the lowest round."""


def lowest_round_checks(results: Results) -> list[tuple[str, bool | None]]:
    """Issue 35's lines on the rounds of this run: each store's lowest round's ratio to @a2a-js/sdk in the same round,
    and each store's p99 at the run's connections against @a2a-js/sdk's (medians over rounds)."""
    js = results.send["js"]
    checks: list[tuple[str, bool | None]] = []
    for key, (store, bar) in ISSUE_35_BARS.items():
        ratios = [mine.rate / theirs.rate for mine, theirs in zip(results.send[key], js) if theirs.rate]
        listed = ", ".join(f"{value:.2f}×" for value in ratios)
        checks.append((f"blocking SendMessage, {store}: a2a-bridge {min(ratios):.2f}× @a2a-js/sdk in the lowest round "
                       f"(rounds {listed}; issue 35: bar ≥ {bar}×)", min(ratios) >= bar))
    for key, (store, _) in ISSUE_35_BARS.items():
        mine, theirs = median_p99_ms(results.send[key]), median_p99_ms(js)
        checks.append((f"blocking SendMessage, {store}: a2a-bridge p99 {mine:.1f} ms against @a2a-js/sdk's {theirs:.1f} "
                       "ms (issue 35: bar ≤ @a2a-js/sdk's)", mine <= theirs))
    return checks


def load_client() -> str:
    """Who sends the timed load runs: wrk (its version) or the Python client."""
    if not WRK:
        return "bench/load.py (wrk not installed)"
    answer = subprocess.run(["wrk", "--version"], capture_output=True, text=True, timeout=10)
    version = (answer.stdout or answer.stderr).split()[1] if (answer.stdout or answer.stderr).split()[1:] else "?"
    return f"wrk {version} (one thread, bench/requests.lua), the Python client for fills and latencies"


def render(results: Results, plan: Plan, listed: list[Server], command: str, elapsed: float, load: float) -> str:
    pinned = "server on core 0, load client on core 1 (taskset)" if PINNED else "server and client unpinned"
    node = node_version()
    lines = [
        f"Measured with `{command}` in {elapsed / 60:.1f} min: {cpu_model()}, {os.cpu_count()} cores, {pinned}; "
        f"load average {load:.2f} before the run; Linux {platform.release()}; CPython {platform.python_version()} ({sys.executable}) runs every Python server "
        f"and the load client (on {'uvloop' if importlib.util.find_spec('uvloop') else 'asyncio'}); "
        f"the timed load runs by {load_client()}"
        + (f"; Node {node} runs @a2a-js/sdk" if node else "; @a2a-js/sdk not measured (node or interop/js/node_modules missing)")
        + f". {versions()}.",
        "",
        f"### Blocking SendMessage ({plan.connections} connections, {plan.rounds} interleaved rounds of "
        f"{plan.seconds:g} s after {plan.warmup:g} s of warm-up; medians over rounds)",
        "",
        *send_table(results, listed),
        "",
        "### GetTask and the Task Status poll on one finished task (same load)",
        "",
        *reads_table(results),
        "",
        f"### Streaming (SendStreamingMessage; {plan.streams} streams of {plan.stream_events} artifact events "
        f"{plan.stream_gap_ms:g} ms apart per round for latency, emit time in each event; one stream of "
        f"{plan.burst_events:,} back-to-back events per round for events/s)",
        "",
        *streams_table(results, listed),
        "",
        f"### Stored tasks (a2a-bridge, SQLite: {results.scale.served:,} served through SendMessage at "
        f"{results.scale.fill_rate:,.0f} tasks/s within {plan.fill_seconds:g} s, {results.scale.inserted:,} copied in "
        f"directly by bench/populate.py; {results.scale.unexpected} unexpected answers; up to {plan.latency_requests} "
        "requests at each size)",
        "",
        *scale_table(results.scale, plan),
        "",
        "### Server RSS",
        "",
        *rss_table(results, plan),
        "",
        "### Acceptance (issues 7 and 18)",
        "",
        *[f"- {'INFO' if passed is None else 'PASS' if passed else 'FAIL'}: {text}" for text, passed in acceptance(results, plan)],
    ]
    return "\n".join(lines)


def write_doc(report: str, path: Path = PERFORMANCE, begin: str = BEGIN, end: str = END) -> None:
    """Put the report between its markers in docs/PERFORMANCE.md, replacing the previous one (a section not there yet
    is added at the end)."""
    block = f"{begin}\n{report}\n{end}"
    if path.exists() and begin in (text := path.read_text()) and end in text:
        head, rest = text.split(begin, 1)
        path.write_text(head + block + rest.split(end, 1)[1])
    elif path.exists():
        path.write_text(path.read_text().rstrip("\n") + f"\n\n{block}\n")
    else:
        path.write_text(f"# Performance\n\nWritten by `make bench` (bench/run.py); `make bench-quick` prints a shorter run.\n\n{block}\n")


def render_replicas(stats: ReplicaStats | None, plan: Plan, command: str, load: float) -> str:
    """The replica section: two bridge processes on one PostgreSQL database, or why it was not measured."""
    lines = [
        "## Replicas on PostgreSQL (bench/replicas.py)",
        "",
        f"Measured with `{command}`: {cpu_model()}, {os.cpu_count()} cores, load average {load:.2f} before the run; "
        "two `a2a-bridge serve --agent bench` processes on one fresh PostgreSQL database (on the same machine), "
        f"unpinned; CPython {platform.python_version()} ({sys.executable}) runs both and the client; "
        f"{plan.replica_samples} samples of each measure after {WARMUP} of warm-up. B hears of A's work by LISTEN/NOTIFY "
        "(NOTIFY sent in the write's transaction); polling is only the safety net (1 s).",
        "",
    ]
    if stats is None:
        return "\n".join([*lines, f"Not measured: {PG_URL} is not set and Debian's postgresql package is not installed."])
    checks = replicas_acceptance(stats)
    return "\n".join([
        *lines, *replicas_table(stats), "", "### Acceptance (issue 13)", "",
        *[f"- {'PASS' if passed else 'FAIL'}: {text}" for text, passed in checks],
    ])


# Reads on the default store (issue 18): GetTask on SQLite side by side with @a2a-js/sdk in memory, and ListTasks'
# first page at the small and the large store. A section of its own (`--only reads`), with its own markers.

SEND_BEGIN, SEND_END = "<!-- bench:send:begin -->", "<!-- bench:send:end -->"
"""`--only send` writes its section between these markers; the full run writes the same section from its rounds."""


def render_send(results: Results, plan: Plan, listed: list[Server], command: str, load: float) -> str:
    """The blocking SendMessage rounds and issue 35's lines on them."""
    lines = [
        "## Blocking SendMessage side by side (issue 35)",
        "",
        f"Measured with `{command}`: {cpu_model()}, {os.cpu_count()} cores, "
        f"{'server on core 0, load client on core 1' if PINNED else 'unpinned'}; load average {load:.2f} before the "
        f"run; CPython {platform.python_version()} ({sys.executable}); load by {load_client()}. {plan.connections} "
        f"connections, {plan.rounds} interleaved rounds of {plan.seconds:g} s after {plan.warmup:g} s of warm-up, each "
        "server restarted every round; medians, and issue 35's bars judged on the lowest round's ratio to @a2a-js/sdk "
        "in the same round.",
        "",
        *send_table(results, listed),
        "",
        "### Acceptance (issue 35, SendMessage)",
        "",
    ]
    checks = lowest_round_checks(results) if "js" in results.send else [
        ("@a2a-js/sdk not measured (node or interop/js/node_modules missing)", False)]
    lines += [f"- {'INFO' if ok is None else 'PASS' if ok else 'FAIL'}: {text}" for text, ok in checks]
    return "\n".join(lines)


READS_BEGIN, READS_END = "<!-- bench:reads:begin -->", "<!-- bench:reads:end -->"
READS_SERVERS = ("js", "bridge-memory", "bridge-sqlite")
AFTER_WRITE_SAMPLES = 30
"""ListTasks answered right after a SendMessage (totalSize counted again), at each size."""


@dataclass
class ReadStats:
    get_task: dict[str, list[Run]] = field(default_factory=dict)
    """GetTask on one finished task, by server key, one run per round."""
    first_page: dict[int, Run] = field(default_factory=dict)
    stored_get: dict[int, Run] = field(default_factory=dict)
    """GetTask of random stored tasks one at a time, by stored tasks, timed in the same alternating chunks."""
    after_write: dict[int, list[float]] = field(default_factory=dict)
    """Seconds of a first page requested right after a write, by stored tasks."""


async def measure_get_task(started: Started, plan: Plan) -> Run:
    """GetTask on one finished task at full concurrency."""
    task_id = checked_send(started)["result"]["task"]["id"]
    request = rpc_request(started, "GetTask", {"id": task_id})
    load = Load(plan.connections, MAX_REQUESTS, plan.seconds)
    await load_run("warmup", started, request, 200, replace(load, seconds=plan.warmup))
    run = await steady(lambda: load_run("GetTask", started, request, 200, load, COMPLETED))
    progress(f"  {started.server.label}: GetTask {summary(run)}")
    return run


FIRST_PAGE_CHUNKS = 10
"""ListTasks' first page is timed in this many chunks, alternating between the small and the large store, so that the
machine's drift over the minute the timing takes falls on both sizes alike."""


@contextlib.contextmanager
def filled_store(bridge: Server, scratch: Path, size: int) -> Iterator[tuple[Started, list[str]]]:
    """The bridge on a SQLite store of `size` tasks: one it served, the rest copied in by bench/populate.py, then one
    more SendMessage so that the server counts the copies too; with the ids of the copies."""
    directory = scratch / f"store-{size}"
    directory.mkdir(exist_ok=True)
    with running(bridge, directory) as started:
        assert started.database is not None
        template = str(checked_send(started)["result"]["task"]["id"])
        copies = clone_tasks(started.database, template, size - 2)
        checked_send(started)
        yield started, copies


async def measure_first_pages(plan: Plan, bridge: Server, scratch: Path, stats: ReadStats) -> None:
    """ListTasks' first page and GetTask of random stored tasks one request at a time, at the small and the large
    store, each served by its own process: timed in alternating chunks, then the first page right after a SendMessage
    in alternation."""
    sizes = (plan.small_store, plan.large_store)
    with contextlib.ExitStack() as stack:
        filled = {size: stack.enter_context(filled_store(bridge, scratch, size)) for size in sizes}
        stores = {size: started for size, (started, _) in filled.items()}
        picker = random.Random(7)
        requests = {
            size: (
                repeat(rpc_request(started, "ListTasks", {"pageSize": LIST_PAGE})),
                cycle([rpc_request(started, "GetTask", {"id": task_id})
                       for task_id in picker.sample(copies, min(len(copies), plan.latency_requests))]),
            )
            for size, (started, copies) in filled.items()
        }
        chunk = Load(1, max(1, plan.latency_requests // FIRST_PAGE_CHUNKS), plan.latency_seconds / FIRST_PAGE_CHUNKS)
        for size, started in stores.items():
            for request_for in requests[size]:
                await drive("warmup", started.port, request_for, 200, replace(chunk, requests=20))
            stats.first_page[size], stats.stored_get[size] = Run("latency"), Run("latency")
        for _ in range(FIRST_PAGE_CHUNKS):
            for size, started in stores.items():
                listing, gets = requests[size]
                for request_for, needle, merged in ((listing, b'"tasks"', stats.first_page[size]),
                                                    (gets, COMPLETED, stats.stored_get[size])):
                    run = await drive("latency", started.port, request_for, 200, chunk, started.pid, needle)
                    merged.latencies += run.latencies
                    merged.completed += run.completed
                    merged.unexpected += run.unexpected
                    merged.elapsed += run.elapsed
        for sample in range(1, AFTER_WRITE_SAMPLES + 1):
            for size, started in stores.items():
                stats.after_write.setdefault(size, []).append(listed_after_write(started, size + sample))
        for size in sizes:
            progress(f"  {size:,} tasks: GetTask (random stored task) p50 "
                     f"{stats.stored_get[size].percentile(0.5) * 1000:.2f} ms, "
                     f"ListTasks first page p50 {stats.first_page[size].percentile(0.5) * 1000:.2f} ms, "
                     f"right after a write p50 {percentile(stats.after_write[size], 0.5) * 1000:.2f} ms")


def listed_after_write(started: Started, stored: int) -> float:
    """Seconds of a ListTasks first page requested right after a SendMessage, whose task makes `stored` tasks (the
    page's `totalSize`)."""
    checked_send(started)
    began = time.perf_counter()
    code, _, body = call(started.port, "POST", started.server.path,
                         {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": LIST_PAGE}}, A2A_HEADERS)
    elapsed = time.perf_counter() - began
    if code != 200 or f'"totalSize":{stored}'.encode() not in body.replace(b" ", b""):
        raise RuntimeError(f"ListTasks after a write answered {code}: {body[:300]!r}")
    return elapsed


async def measure_reads_section(plan: Plan, listed: list[Server], scratch: Path) -> ReadStats:
    stats = ReadStats()
    chosen = [server for server in listed if server.key in READS_SERVERS]
    for number in range(plan.rounds):
        progress(f"reads: round {number + 1}/{plan.rounds}")
        for server in chosen[number % len(chosen):] + chosen[:number % len(chosen)]:
            with running(server, scratch) as started:
                stats.get_task.setdefault(server.key, []).append(await measure_get_task(started, plan))
    progress(f"reads: ListTasks' first page at {plan.small_store:,} and {plan.large_store:,} stored tasks")
    await measure_first_pages(plan, next(s for s in listed if s.key == "bridge-sqlite"), scratch, stats)
    return stats


def reads_acceptance(stats: ReadStats, plan: Plan) -> list[tuple[str, bool | None]]:
    checks: list[tuple[str, bool | None]] = []
    sqlite = median_rate(stats.get_task["bridge-sqlite"])
    if "js" in stats.get_task:
        js = median_rate(stats.get_task["js"])
        checks.append((f"GetTask, a2a-bridge on SQLite {sqlite / js:.2f}× @a2a-js/sdk in memory (bar ≥ 1.0×)", sqlite >= js))
    else:
        checks.append(("GetTask on SQLite against @a2a-js/sdk: not measured (node or interop/js/node_modules missing)", False))
    small, large = plan.small_store, plan.large_store
    growth = stats.first_page[large].percentile(0.5) / stats.first_page[small].percentile(0.5)
    checks.append((f"ListTasks first page p50 with {large:,} stored tasks {growth:.2f}× the time with {small:,} "
                   "(bar ≤ 1.2×)", growth <= 1.2))
    growth = stats.stored_get[large].percentile(0.5) / stats.stored_get[small].percentile(0.5)
    checks.append((f"GetTask (random stored task) p50 with {large:,} stored tasks {growth:.2f}× the time with "
                   f"{small:,} (issue 7: bar ≤ 1.2×)", growth <= 1.2))
    written = percentile(stats.after_write[large], 0.5) / percentile(stats.after_write[small], 0.5)
    checks.append((f"ListTasks first page right after a write (totalSize counted again) p50 with {large:,} stored "
                   f"tasks {written:.2f}× the time with {small:,} (no bar)", None))
    return checks


def render_reads(stats: ReadStats, plan: Plan, listed: list[Server], command: str, load: float) -> str:
    labels = {server.key: server.label for server in listed}
    base = median_rate(stats.get_task["js"]) if "js" in stats.get_task else 0.0
    small, large = plan.small_store, plan.large_store
    lines = [
        "## Reads on the default store (issue 18)",
        "",
        f"Measured with `{command}`: {cpu_model()}, {os.cpu_count()} cores, "
        f"{'server on core 0, load client on core 1' if PINNED else 'unpinned'}; load average {load:.2f} before the "
        f"run; load by {load_client()}. GetTask on one finished task, {plan.connections} connections, "
        f"{plan.rounds} interleaved rounds of {plan.seconds:g} s after {plan.warmup:g} s of warm-up, medians.",
        "",
        "| server | GetTask req/s | p99 ms | vs @a2a-js/sdk | server CPU (waited) | client CPU (waited) | req/s per round |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for key in READS_SERVERS:
        runs = stats.get_task.get(key)
        if not runs:
            continue
        rate = median_rate(runs)
        lines.append(f"| {labels[key]} | {rate:,.0f} | {median_p99_ms(runs):.1f} | {ratio(rate, base)} "
                     f"| {cpu(runs, 'server')} | {cpu(runs, 'client')} | {', '.join(f'{r.rate:,.0f}' for r in runs)} |")
    lines += [
        "",
        f"GetTask of random stored tasks and ListTasks' first page ({LIST_PAGE} tasks; a2a-bridge, SQLite; each size "
        f"served by its own process; one request at a time, up to {plan.latency_requests} requests of each at each "
        f"size in {FIRST_PAGE_CHUNKS} chunks alternating between the sizes; then {AFTER_WRITE_SAMPLES} first pages "
        "each right after a SendMessage, alternating too):",
        "",
        f"| request | p50 ms at {small:,} | p99 ms at {small:,} | p50 ms at {large:,} | p99 ms at {large:,} "
        f"| {large:,} / {small:,} (p50) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    pages = [stats.first_page[small].latencies, stats.first_page[large].latencies]
    gets = [stats.stored_get[small].latencies, stats.stored_get[large].latencies]
    for label, (few, many) in (("GetTask (random stored task)", gets), ("ListTasks first page", pages),
                               ("ListTasks first page right after a write", (stats.after_write[small], stats.after_write[large]))):
        cells = [f"{percentile(values, q) * 1000:.2f}" for values in (few, many) for q in (0.5, 0.99)]
        lines.append(f"| {label} | {' | '.join(cells)} | {ratio(percentile(many, 0.5), percentile(few, 0.5))} |")
    lines += ["", "### Acceptance (issue 18, reads)", "",
              *[f"- {'INFO' if passed is None else 'PASS' if passed else 'FAIL'}: {text}"
                for text, passed in reads_acceptance(stats, plan)]]
    return "\n".join(lines)


# Push notifications on the default store (issue 30): SendMessage on SQLite with one push config per task, side by
# side with the same load without, and the delivery lag. A section of its own (`--only push`), with its own markers.

PUSH_BEGIN, PUSH_END = "<!-- bench:push:begin -->", "<!-- bench:push:end -->"
PUSH_NETWORK = "127.0.0.1/32"
"""The network the push section's server may send webhooks to (`--allow-webhook-network`): the loopback receiver."""
PUSH_BAR = 0.8
"""Issue 30: SendMessage with a push config per task at this share of the rate without, in the lowest round."""
DRAIN_SECONDS = 60.0
"""The cap on waiting, after a run with push configs, for every task's terminal status to reach the receiver."""
DRAIN_POLL = 0.05


@dataclass
class Deliveries:
    """What the receiver got from one run with push configs."""

    tasks: int = 0
    """Tasks the run's SendMessages answered (each with its push config)."""
    posts: int = 0
    terminal: int = 0
    """Terminal status updates received (one per task when every delivery arrived once)."""
    lags: list[float] = field(default_factory=list)
    """Seconds from each terminal status's timestamp to the receiver's 2xx."""
    drained: float | None = None
    """Seconds after the run's end until the receiver had a terminal status per task (None: not within DRAIN_SECONDS)."""
    receiver_cpu: float = 0.0
    """The receiver's share of a core from the run's start to its drain."""


@dataclass
class PushStats:
    plain: list[Run] = field(default_factory=list)
    """SendMessage without a push config, one run per round."""
    push: list[Run] = field(default_factory=list)
    """SendMessage with one push config per task, one run per round (the same rounds)."""
    deliveries: list[Deliveries] = field(default_factory=list)


@dataclass
class Receiver:
    process: "subprocess.Popen[bytes]"
    port: int

    def stats(self, clear: bool = False) -> dict[str, Any]:
        """What bench/receiver.py got since it started or was last cleared (cleared after this answer if `clear`)."""
        code, _, body = call(self.port, "GET", "/stats?clear" if clear else "/stats")
        if code != 200:
            raise RuntimeError(f"the webhook receiver answered {code}: {body[:300]!r}")
        answer: dict[str, Any] = json.loads(body)
        return answer

    def configuration(self) -> dict[str, object]:
        """A SendMessage's configuration with one push config: a webhook to this receiver."""
        return {"taskPushNotificationConfig": {"url": f"http://{HOST}:{self.port}/hook", "token": "bench"}}


def push_server(listed: list[Server]) -> Server:
    """The bridge on a fresh SQLite file that may send webhooks to the loopback receiver; both variants run it."""
    bridge = next(server for server in listed if server.key == "bridge-sqlite")

    def argv(port: int, database: Path | None) -> list[str]:
        return [*bridge.argv(port, database), "--allow-webhook-network", PUSH_NETWORK]

    return replace(bridge, key="bridge-sqlite-push", argv=argv)


@contextlib.contextmanager
def receiving(scratch: Path) -> Iterator[Receiver]:
    """bench/receiver.py on a free loopback port (on the client's core where the machine has two), stopped on exit."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.receiver", str(port)]
    if PINNED:
        argv = ["taskset", "-c", str(CLIENT_CORE), *argv]
    log = scratch / "receiver.log"
    with log.open("wb") as errors:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=errors)
    try:
        wait_listening("the webhook receiver", port, process, log)
        yield Receiver(process, port)
    finally:
        stop(process)


async def drain(receiver: Receiver, tasks: int) -> float | None:
    """Seconds until the receiver holds a terminal status for `tasks` tasks; None if not within DRAIN_SECONDS."""
    began = time.monotonic()
    while time.monotonic() - began < DRAIN_SECONDS:
        if receiver.stats()["terminal"] >= tasks:
            return time.monotonic() - began
        await asyncio.sleep(DRAIN_POLL)
    return None


async def measure_push_run(started: Started, receiver: Receiver, plan: Plan) -> tuple[Run, Deliveries]:
    """SendMessage with one push config per task at full concurrency, then the wait for its deliveries; the
    receiver cleared first, once the warm-up's deliveries have arrived."""
    load = Load(plan.connections, MAX_REQUESTS, plan.seconds)
    configuration = receiver.configuration()
    warmed = receiver.stats()["terminal"]
    checked_send(started, configuration=configuration)
    warmup = await load_run("warmup", started, send_request(started, configuration=configuration), 200,
                            replace(load, seconds=plan.warmup))
    await drain(receiver, warmed + 1 + warmup.completed - warmup.unexpected)
    receiver.stats(clear=True)
    receiver_before = cpu_seconds(receiver.process.pid)
    began = time.perf_counter()
    run = await load_run("SendMessage", started, send_request(started, configuration=configuration), 200, load,
                         started.server.needle)
    deliveries = Deliveries(tasks=run.completed - run.unexpected)
    deliveries.drained = await drain(receiver, deliveries.tasks)
    got = receiver.stats(clear=True)
    deliveries.posts, deliveries.terminal = got["posts"], got["terminal"]
    deliveries.lags = [lag / 1e6 for lag in got["lags_us"]]
    deliveries.receiver_cpu = (cpu_seconds(receiver.process.pid) - receiver_before) / (time.perf_counter() - began)
    return run, deliveries


async def steady_push(started: Started, receiver: Receiver, plan: Plan) -> tuple[Run, Deliveries]:
    """`steady` for the run with push configs: run again once when contended, the calmer kept with its deliveries."""
    first = await measure_push_run(started, receiver, plan)
    if waited(first[0]) <= CONTENDED:
        return first
    return min(first, await measure_push_run(started, receiver, plan), key=lambda measured: waited(measured[0]))


async def measure_push_section(plan: Plan, listed: list[Server], scratch: Path) -> PushStats:
    """Each round: the bridge on a fresh SQLite file without push configs and with one per task (order alternating
    between rounds), each run by a server of its own; one receiver for the round."""
    stats = PushStats()
    server = push_server(listed)
    for number in range(plan.rounds):
        progress(f"push: round {number + 1}/{plan.rounds}")
        with receiving(scratch) as receiver:
            for variant in (("plain", "push") if number % 2 == 0 else ("push", "plain")):
                with running(server, scratch) as started:
                    if variant == "plain":
                        run = await measure_send(started, plan)
                        stats.plain.append(run)
                        continue
                    run, deliveries = await steady_push(started, receiver, plan)
                    stats.push.append(run)
                    stats.deliveries.append(deliveries)
                    drained = "never" if deliveries.drained is None else f"{deliveries.drained:.2f} s"
                    progress(f"  with a push config per task: SendMessage {summary(run)}; receiver CPU "
                             f"{deliveries.receiver_cpu:.0%}; {deliveries.terminal:,} terminal of {deliveries.tasks:,} "
                             f"tasks ({deliveries.posts:,} webhooks), all in {drained} after the run; lag p50 "
                             f"{percentile(deliveries.lags, 0.5) * 1000:.1f} ms, p99 "
                             f"{percentile(deliveries.lags, 0.99) * 1000:.1f} ms")
    return stats


def push_ratios(stats: PushStats) -> list[float]:
    """Each round's rate with push configs over its rate without."""
    return [push.rate / plain.rate if plain.rate else 0.0 for plain, push in zip(stats.plain, stats.push)]


def push_acceptance(stats: PushStats) -> list[tuple[str, bool | None]]:
    ratios = push_ratios(stats)
    lags = [lag for deliveries in stats.deliveries for lag in deliveries.lags]
    tasks = sum(deliveries.tasks for deliveries in stats.deliveries)
    terminal = sum(deliveries.terminal for deliveries in stats.deliveries)
    every = all(deliveries.drained is not None for deliveries in stats.deliveries)
    return [
        (f"SendMessage on SQLite with one push config per task {min(ratios):.2f}× the rate without push in the lowest "
         f"round (median round {statistics.median(ratios):.2f}×; bar ≥ {PUSH_BAR}×)", min(ratios) >= PUSH_BAR),
        (f"every task's terminal status delivered: {terminal:,} terminal webhooks for {tasks:,} tasks, each round's "
         f"within {DRAIN_SECONDS:g} s of its end", every),
        (f"delivery lag from the terminal status's timestamp to the receiver's 2xx: p50 "
         f"{percentile(lags, 0.5) * 1000:.1f} ms, p99 {percentile(lags, 0.99) * 1000:.1f} ms (no bar)", None),
    ]


def render_push(stats: PushStats, plan: Plan, command: str, load: float) -> str:
    ratios = push_ratios(stats)
    base = median_rate(stats.plain)
    lines = [
        "## Push notifications on the default store (issue 30)",
        "",
        f"Measured with `{command}`: {cpu_model()}, {os.cpu_count()} cores, "
        f"{'server on core 0, load client and webhook receiver on core 1' if PINNED else 'unpinned'}; load average "
        f"{load:.2f} before the run; CPython {platform.python_version()} ({sys.executable}); load by {load_client()}. "
        f"Blocking SendMessage to a2a-bridge on a fresh SQLite file (`--allow-webhook-network {PUSH_NETWORK}`), "
        "without a push config and with `configuration.taskPushNotificationConfig` in every message (a webhook to "
        f"bench/receiver.py, a bare asyncio HTTP server answering 200 at once), {plan.connections} connections, "
        f"{plan.rounds} rounds of {plan.seconds:g} s after {plan.warmup:g} s of warm-up, the two variants alternating "
        "in order, each on a server of its own; medians. The lag is the receiver's clock when it writes its 2xx minus "
        "the terminal status's `timestamp` in the webhook's body, over every task of the runs: the status is made "
        "just before the save that commits it, so the lag also counts the save's wait for its transaction, up to the "
        "SendMessage's own latency (its p99 above). After each run the bench waits for a terminal status per task.",
        "",
        "| SendMessage | req/s | p99 ms | vs without push | server CPU (waited) | client CPU (waited) | req/s per round "
        "| unexpected |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for label, runs in (("without push", stats.plain), ("one push config per task", stats.push)):
        rate = median_rate(runs)
        lines.append(f"| {label} | {rate:,.0f} | {median_p99_ms(runs):.1f} | {ratio(rate, base)} "
                     f"| {cpu(runs, 'server')} | {cpu(runs, 'client')} | {', '.join(f'{r.rate:,.0f}' for r in runs)} "
                     f"| {sum(r.unexpected for r in runs)} |")
    lines += [
        "",
        "| round | with / without push | tasks | webhooks | terminal webhooks | lag p50 ms | lag p99 ms | lag max ms "
        "| all delivered after the run | receiver CPU |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for number, (share, deliveries) in enumerate(zip(ratios, stats.deliveries), 1):
        lags = deliveries.lags
        drained = "not in time" if deliveries.drained is None else f"{deliveries.drained:.2f} s"
        lines.append(f"| {number} | {share:.2f}× | {deliveries.tasks:,} | {deliveries.posts:,} | {deliveries.terminal:,} "
                     f"| {percentile(lags, 0.5) * 1000:.1f} | {percentile(lags, 0.99) * 1000:.1f} "
                     f"| {max(lags, default=0.0) * 1000:.1f} | {drained} | {deliveries.receiver_cpu:.0%} |")
    lines += ["", "### Acceptance (issue 30, push)", "",
              *[f"- {'INFO' if passed is None else 'PASS' if passed else 'FAIL'}: {text}"
                for text, passed in push_acceptance(stats)]]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    root.add_argument("--quick", action="store_true", help="one short round and smaller stores (make bench-quick)")
    root.add_argument("--rounds", type=int, help="interleaved rounds")
    root.add_argument("--seconds", type=float, help="time limit of each load run")
    root.add_argument("--large-store", type=int, help="tasks in the large SQLite store")
    root.add_argument("--bridge-root", type=Path, default=ROOT, help="run a2a-bridge from this source tree")
    root.add_argument("--no-write", action="store_true", help=f"print only; do not update {PERFORMANCE.relative_to(ROOT)}")
    root.add_argument("--only", choices=["send", "replicas", "reads", "push", "postgres"], help="measure only this part (and write only its section)")
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    plan = QUICK if args.quick else Plan()
    plan = replace(
        plan,
        rounds=args.rounds or plan.rounds,
        seconds=args.seconds or plan.seconds,
        large_store=args.large_store or plan.large_store,
    )
    command = " ".join(["python -m bench.run", *(sys.argv[1:] if argv is None else argv)])
    if PINNED:
        os.sched_setaffinity(0, {CLIENT_CORE})
    listed = servers(args.bridge_root.resolve())
    started, load = time.monotonic(), os.getloadavg()[0]
    wants_pg = args.only in (None, "replicas", "postgres")
    with (tempfile.TemporaryDirectory(prefix="a2a-bench-") as scratch,
          asyncio.Runner(loop_factory=event_loop_factory()) as runner,
          postgres.postgres_server() if wants_pg else contextlib.nullcontext() as pg):
        results = None if args.only else runner.run(measure_all(plan, listed, Path(scratch)))
        sends = results or (runner.run(measure_send_section(plan, listed, Path(scratch))) if args.only == "send" else None)
        reads = runner.run(measure_reads_section(plan, listed, Path(scratch))) if args.only in (None, "reads") else None
        push = runner.run(measure_push_section(plan, listed, Path(scratch))) if args.only in (None, "push") else None
        on_pg = None
        if pg and args.only in (None, "postgres"):
            on_pg = runner.run(postgres.measure_postgres_section(plan, listed, Path(scratch), *pg))
        replicas = None
        if pg and args.only in (None, "replicas"):
            progress(f"replicas: two bridge processes on PostgreSQL, {plan.replica_samples} samples of each measure")
            replicas = runner.run(measure_replicas(pg[0], plan.replica_samples, Path(scratch)))
    sections: list[tuple[str, str, str]] = []
    if results is not None:
        sections.append((render(results, plan, listed, command, time.monotonic() - started, load), BEGIN, END))
    if sends is not None:
        sections.append((render_send(sends, plan, listed, command, load), SEND_BEGIN, SEND_END))
    if args.only in (None, "replicas"):
        sections.append((render_replicas(replicas, plan, command, load), REPLICAS_BEGIN, REPLICAS_END))
    if reads is not None:
        sections.append((render_reads(reads, plan, listed, command, load), READS_BEGIN, READS_END))
    if push is not None:
        sections.append((render_push(push, plan, command, load), PUSH_BEGIN, PUSH_END))
    if args.only in (None, "postgres"):
        sections.append((postgres.render_postgres(on_pg, plan, listed, command, load), postgres.POSTGRES_BEGIN,
                         postgres.POSTGRES_END))
    for report, begin, end in sections:
        print(report)
        if not args.no_write:
            write_doc(report, begin=begin, end=end)


if __name__ == "__main__":
    main()
