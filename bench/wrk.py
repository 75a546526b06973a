"""`make bench`'s load runs through wrk (a C load generator, so the client is not the limit) where it is installed:
one wrk thread, pinned with the rest of the client to its core, driving bench/requests.lua's requests (a fresh
messageId in every SendMessage). Bounded like the Python client (bench/load.py): wrk's duration, and a request
limit the script stops each thread at. What the run measured comes back as bench/status_poll.py's `Run`, with the
latency percentiles wrk reports and the CPU wrk itself used."""

import asyncio
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from bench.load import wait_seconds
from bench.status_poll import HOST, RESPONSE_TIMEOUT, Load, Run, cpu_seconds

SCRIPT = Path(__file__).with_name("requests.lua")
PLACEHOLDER = "@@@@@@@@@@"
"""Where bench/requests.lua writes each request's own ten-digit number."""
SAMPLE_EVERY = 0.1
"""Seconds between two readings of wrk's scheduler statistics while it runs (the last before it exits is kept)."""


def installed() -> bool:
    return shutil.which("wrk") is not None


def argv(port: int, request: bytes, expected: int, needle: bytes, load: Load) -> list[str]:
    seconds = max(1, round(load.seconds))
    return [
        "wrk", "--threads", "1", "--connections", str(load.connections), "--duration", f"{seconds}s",
        "--timeout", f"{RESPONSE_TIMEOUT:g}s", "--script", str(SCRIPT), f"http://{HOST}:{port}", "--",
        os.fsdecode(request), str(expected), needle.decode(), str(load.requests),
    ]


async def drive(
    name: str, port: int, request: bytes, expected: int, load: Load, server_pid: int | None = None, needle: bytes = b""
) -> Run:
    """One wrk run of `request` (PLACEHOLDER in it numbered anew each time it is sent); a response counts as
    unexpected unless its status is `expected` and its body holds `needle`. The server's and wrk's CPU (and their
    time waiting for a CPU) are shares of the run."""
    run = Run(name)
    server_before, server_waited = cpu_seconds(server_pid), wait_seconds(server_pid)
    started = time.perf_counter()
    process = subprocess.Popen(argv(port, request, expected, needle, load), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    finished = asyncio.ensure_future(asyncio.to_thread(reap, process))
    client_waited = 0.0
    try:
        while not finished.done():
            client_waited = wait_seconds(process.pid) or client_waited
            await asyncio.wait({finished}, timeout=SAMPLE_EVERY)
        stdout, stderr, client_cpu = await asyncio.wait_for(finished, load.seconds + RESPONSE_TIMEOUT)
    finally:
        if process.returncode is None:
            process.kill()
            await finished
    wall = time.perf_counter() - started
    run.server_cpu = (cpu_seconds(server_pid) - server_before) / wall
    run.server_wait = (wait_seconds(server_pid) - server_waited) / wall
    run.client_cpu = client_cpu / wall
    run.client_wait = client_waited / wall
    lines = stdout.decode().strip().splitlines()
    if process.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise RuntimeError(f"wrk failed ({process.returncode}): {stderr.decode()[-500:]} {stdout.decode()[-500:]}")
    report = json.loads(lines[-1])
    run.completed = report["requests"]
    run.unexpected = report["unexpected"] + report["errors"]
    run.elapsed = report["duration_us"] / 1e6
    run.quantiles = {fraction: report[key] / 1e6 for fraction, key in QUANTILES.items()}
    return run


QUANTILES = {0.5: "p50_us", 0.9: "p90_us", 0.99: "p99_us", 0.999: "p999_us"}
"""The latency percentiles bench/requests.lua reports, by fraction."""


def reap(process: "subprocess.Popen[bytes]") -> tuple[bytes, bytes, float]:
    """wrk's output and the CPU seconds it used, once it has exited (its resource usage read as it is reaped)."""
    assert process.stdout is not None and process.stderr is not None
    stdout, stderr = process.stdout.read(), process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return stdout, stderr, usage.ru_utime + usage.ru_stime
