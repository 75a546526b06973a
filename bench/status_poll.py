"""A 304 Task Status poll against JSON-RPC GetTask on the same finished task, one a2a-bridge process on loopback.

Run with `make bench` or `python -m bench.status_poll`. The server runs on core 0 (taskset) and this client on core 1
where the machine has two cores; every run is bounded by a request count and a time limit, and all traffic stays on
127.0.0.1.
"""

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
AGENT = "test-runner"
START_TIMEOUT = 30.0
RESPONSE_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
SERVER_CORE = 0
CLIENT_CORE = 1
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Load:
    """How hard and how long one run pushes: connections in parallel, at most `requests`, for at most `seconds`."""

    connections: int = 32
    requests: int = 100_000
    seconds: float = 3.0


@dataclass
class Run:
    """What one run measured."""

    name: str
    completed: int = 0
    unexpected: int = 0
    elapsed: float = 0.0
    latencies: list[float] = field(default_factory=list)
    server_cpu: float = 0.0
    client_cpu: float = 0.0
    server_wait: float = 0.0
    """The share of the run the server's threads were runnable but waited for a CPU (other processes on its core)."""
    client_wait: float = 0.0
    quantiles: dict[float, float] = field(default_factory=dict)
    """Latency percentiles by fraction, where the client reported those rather than every latency (wrk)."""

    @property
    def rate(self) -> float:
        return self.completed / self.elapsed if self.elapsed else 0.0

    def percentile(self, fraction: float) -> float:
        """A latency percentile in seconds (nearest rank; wrk's own where it measured the run)."""
        if not self.latencies and fraction in self.quantiles:
            return self.quantiles[fraction]
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def http_request(method: str, path: str, port: int, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    """The bytes of one HTTP/1.1 keep-alive request."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}:{port}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Status code and body of one response (Content-Length, chunked, or none for 304/204)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split(" ", 2)[1])
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        return status, await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")
        return status, body
    return status, b""


async def drive(name: str, port: int, request: bytes, expected: int, load: Load, server_pid: int | None = None) -> Run:
    """Send `request` over `load.connections` keep-alive connections until the count or the time runs out."""
    run = Run(name)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + load.seconds
    budget = load.requests

    async def connection() -> None:
        nonlocal budget
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            while budget > 0 and loop.time() < deadline:
                budget -= 1
                sent = time.perf_counter()
                writer.write(request)
                status, _ = await asyncio.wait_for(read_response(reader), RESPONSE_TIMEOUT)
                run.latencies.append(time.perf_counter() - sent)
                run.completed += 1
                if status != expected:
                    run.unexpected += 1
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    server_before = cpu_seconds(server_pid)
    client_before = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(load.connections)))
    run.elapsed = time.perf_counter() - started
    run.server_cpu = (cpu_seconds(server_pid) - server_before) / run.elapsed
    run.client_cpu = (time.process_time() - client_before) / run.elapsed
    return run


def cpu_seconds(pid: int | None) -> float:
    """User plus system CPU seconds a process has used, from /proc (0 where /proc is absent)."""
    stat = Path(f"/proc/{pid}/stat")
    if pid is None or not stat.exists():
        return 0.0
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def two_cores() -> bool:
    return hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2


@contextlib.contextmanager
def bridge_server(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """`a2a-bridge serve --store memory` on loopback, on core 0 where possible; stopped on exit."""
    command = [sys.executable, "-m", "a2a_bridge", "serve", "--host", HOST, "--port", str(port),
               "--store", "memory", "--pace", "0", "--log-level", "warning"]
    if two_cores() and shutil.which("taskset"):
        command = ["taskset", "-c", str(SERVER_CORE), *command]
    process = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1])
    try:
        wait_until_up(port, process)
        yield process
    finally:
        stop(process)


def stop(process: "subprocess.Popen[bytes]") -> None:
    """End a server process: terminated, and killed if it has not exited within STOP_TIMEOUT seconds."""
    process.terminate()
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_TIMEOUT)


def wait_until_up(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"a2a-bridge exited with {process.returncode}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"http://{HOST}:{port}/", timeout=1) as response:
                if response.status == 200:
                    return
        time.sleep(0.05)
    raise RuntimeError(f"a2a-bridge did not answer on port {port} within {START_TIMEOUT} s")


def call(port: int, method: str, path: str, body: dict[str, object] | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One setup request with the standard library (status, headers, body); 304 is an answer, not an error."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://{HOST}:{port}{path}", data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=RESPONSE_TIMEOUT) as response:
            return response.status, lowered(response.headers.items()), response.read()
    except urllib.error.HTTPError as answer:
        return answer.code, lowered(answer.headers.items()), answer.read()


def lowered(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers}


A2A_HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}


def finished_task(port: int, agent: str = AGENT) -> tuple[str, str]:
    """A completed task of `agent` (test-runner unless named); returns its id and the ETag of its status."""
    message = {"messageId": f"bench-{time.time_ns()}", "role": "ROLE_USER",
               "parts": [{"text": "Run the unit tests for payments-api at commit 9f3c2e1"}]}
    envelope = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    _, _, body = call(port, "POST", f"/{agent}/a2a/jsonrpc", envelope, A2A_HEADERS)
    task = json.loads(body)["result"]["task"]
    if task["status"]["state"] != "TASK_STATE_COMPLETED":
        raise RuntimeError(f"the benchmark task did not complete: {task['status']}")
    _, headers, _ = call(port, "GET", f"/{agent}/tasks/{task['id']}/status")
    return task["id"], headers["etag"]


def requests_for(port: int, task_id: str, etag: str, agent: str = AGENT) -> dict[str, tuple[bytes, int]]:
    """The two requests compared, each with the status it must get; each is checked once before it is measured."""
    status_path = f"/{agent}/tasks/{task_id}/status"
    get_task = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
    code, _, _ = call(port, "GET", status_path, headers={"If-None-Match": etag})
    if code != 304:
        raise RuntimeError(f"the status poll answered {code}, not 304")
    code, _, body = call(port, "POST", f"/{agent}/a2a/jsonrpc", get_task, A2A_HEADERS)
    if code != 200 or json.loads(body).get("result", {}).get("id") != task_id:
        raise RuntimeError(f"GetTask answered {code}: {body[:200]!r}")
    return {
        "304 status poll": (http_request("GET", status_path, port, {"If-None-Match": etag}), 304),
        "GetTask (JSON-RPC)": (
            http_request("POST", f"/{agent}/a2a/jsonrpc", port, A2A_HEADERS, json.dumps(get_task).encode()),
            200,
        ),
    }


def median_of(runs: list[Run], measure: Callable[[Run], float]) -> float:
    return statistics.median(measure(run) for run in runs)


def table(results: dict[str, list[Run]], load: Load, rounds: int, pinned: bool) -> str:
    """The medians over the rounds, as a Markdown table with the setup it was measured in."""
    lines = [
        f"Python {platform.python_version()} ({platform.python_implementation()}), {platform.machine()}, "
        f"{os.cpu_count()} cores; server {'on core 0, client on core 1' if pinned else 'and client unpinned'}; "
        f"{load.connections} connections, {rounds} interleaved rounds of at most {load.seconds:g} s "
        f"or {load.requests} requests per run; medians over rounds",
        "",
        "| request | req/s | p50 ms | p99 ms | server CPU | client CPU | req/s per round | unexpected |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for name, runs in results.items():
        lines.append(
            f"| {name} | {median_of(runs, lambda r: r.rate):,.0f} | {median_of(runs, lambda r: r.percentile(0.5)) * 1000:.2f} "
            f"| {median_of(runs, lambda r: r.percentile(0.99)) * 1000:.2f} | {median_of(runs, lambda r: r.server_cpu):.0%} "
            f"| {median_of(runs, lambda r: r.client_cpu):.0%} | {', '.join(f'{r.rate:,.0f}' for r in runs)} "
            f"| {sum(r.unexpected for r in runs)} |"
        )
    poll, get = (median_of(runs, lambda r: r.rate) for runs in results.values())
    lines += ["", f"304 status poll / GetTask: {poll / get:.2f}x"]
    return "\n".join(lines)


async def measure(port: int, server_pid: int, load: Load, rounds: int, warmup: Load) -> dict[str, list[Run]]:
    """Warm both requests up, then run them in turn, `rounds` times."""
    task_id, etag = finished_task(port)
    requests = requests_for(port, task_id, etag)
    for name, (request, expected) in requests.items():
        await drive(name, port, request, expected, warmup, server_pid)
    results: dict[str, list[Run]] = {name: [] for name in requests}
    for _ in range(rounds):
        for name, (request, expected) in requests.items():
            results[name].append(await drive(name, port, request, expected, load, server_pid))
    return results


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m bench.status_poll", description=__doc__.splitlines()[0])
    root.add_argument("--connections", type=int, default=Load.connections)
    root.add_argument("--seconds", type=float, default=Load.seconds, help="time limit of each run")
    root.add_argument("--requests", type=int, default=Load.requests, help="request limit of each run")
    root.add_argument("--rounds", type=int, default=3)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    load = Load(args.connections, args.requests, args.seconds)
    warmup = Load(args.connections, min(args.requests, 2_000), min(args.seconds, 1.0))
    pinned = two_cores()
    port = free_port()
    with bridge_server(port) as server:
        if pinned:
            os.sched_setaffinity(0, {CLIENT_CORE})
        results = asyncio.run(measure(port, server.pid, load, args.rounds, warmup))
    print(table(results, load, args.rounds, pinned))


if __name__ == "__main__":
    main()
