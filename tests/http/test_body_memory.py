"""Refused bodies cost the server neither memory nor time (issue 31 item 4): 100 bodies of about 979 KB, each a flat
object of 66,000 keys, are refused from their bytes, before any Python object is built; the server process's resident
memory, read from /proc before and after, grows by far less than the bodies, and it keeps answering."""

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import A2A, ServerProcess, rpc, user_message

BODIES = 100
KEYS = 66_000
GROWTH = 64 * 1024 * 1024
"""Bytes of resident memory the server may gain over the 100 bodies (before the fix it gained about 1 GB)."""
SECONDS = 30.0
"""Wall time the 100 refusals may take on a loaded machine (before the fix they cost 30 s of server CPU)."""


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    process = ServerProcess("memory").start()
    yield process
    process.stop()


def resident_bytes(pid: int) -> int:
    """VmRSS of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def crowded_body() -> bytes:
    """A SendMessage whose metadata is a flat object of KEYS keys, about 979 KB."""
    metadata = {f"k{i:08x}": i % 10 for i in range(KEYS)}
    message = {"messageId": f"mem-{uuid.uuid4().hex}", "role": "ROLE_USER", "parts": [{"text": "hi"}],
               "metadata": metadata}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}},
                      separators=(",", ":")).encode()
    assert 900_000 < len(body) < 1_048_576, len(body)
    return body


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to read a process's memory")
def test_a_hundred_crowded_bodies_are_refused_without_holding_memory(server: ServerProcess) -> None:
    assert server.proc is not None
    runner = server.agent("test-runner")
    body = crowded_body()
    headers = {**A2A, "Content-Type": "application/json"}
    assert "result" in rpc(runner, "SendMessage", {"message": user_message("Run the unit tests", "mem-first")})
    before = resident_bytes(server.proc.pid)
    started = time.monotonic()
    with httpx.Client(timeout=60) as client:
        replies = [client.post(f"{runner}/a2a/jsonrpc", content=body, headers=headers).json() for _ in range(BODIES)]
        rest = client.post(f"{runner}/a2a/rest/message:send", content=body, headers=headers)
    elapsed = time.monotonic() - started
    grown = resident_bytes(server.proc.pid) - before
    assert grown < GROWTH, f"resident memory grew by {grown / 2**20:.0f} MiB over {BODIES} refused bodies"
    assert elapsed < SECONDS, f"{BODIES} refusals took {elapsed:.1f} s"
    for reply in replies:
        assert reply["error"]["code"] == -32600, reply
        assert "commas and colons" in json.dumps(reply["error"]), reply
    assert rest.status_code == 400 and "commas and colons" in rest.text
    assert "result" in rpc(runner, "SendMessage", {"message": user_message("Run the unit tests", "mem-last")})
