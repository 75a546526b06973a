"""Store faults through the wire: a full disk, a store file taken away, a claim left behind with its lease run out.
Every task reaches its true state without a restart, and every caller gets an answer: the result once it is
stored, else a clear "store unavailable" (-32603 on A2A, 503 on the bridge's endpoints)."""

import errno
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.claim_support import (
    FULL_SUITE,
    OPERATOR,
    RECONCILE_TEXT,
    claim_view,
    get_task,
    operations,
    start,
    start_deploys,
    status_text,
    wait_state,
)
from tests.support import ServerProcess, rpc, user_message, wait_for

PACE = 0.3
PAD = "x" * 200_000
"""Metadata that makes every save of a task about 200 KB, so that a few turns outgrow what SQLite kept free."""


def padded(text: str, message_id: str) -> dict[str, Any]:
    return {**user_message(text, message_id), "metadata": {"pad": PAD}}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 32 MiB tmpfs of its own (CI runs as root; elsewhere the test is skipped when mounting is not allowed)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        if os.environ.get("CI") == "true":
            raise AssertionError(f"CI runs as root and must mount a tmpfs: {mounted.stderr.decode()}")
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Fill the filesystem to the last byte with one file; returns it (remove it to free the space)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
    return filler


def readiness(server: ServerProcess) -> httpx.Response:
    return httpx.get(f"{server.url}/readyz", timeout=10)


def test_a_full_disk_keeps_the_turns_events_and_stores_them_when_space_is_back(small_disk: Path) -> None:
    server = ServerProcess(f"sqlite:///{small_disk / 'bridge.db'}", pace=PACE).start()
    try:
        assert readiness(server).status_code == 200
        runs = [start(server, "test-runner", padded(FULL_SUITE, f"disk-run-{n}"))["id"] for n in range(4)]
        for task_id in runs:
            wait_state(server, "test-runner", task_id, "TASK_STATE_WORKING")
        filler = fill(small_disk)
        failing = wait_for(lambda: readiness(server).status_code == 503 and readiness(server), timeout=60, what="a write to fail")
        assert "failed" in failing.json()["reason"]

        refused = rpc(server.agent("test-runner"), "SendMessage", {"message": padded(FULL_SUITE, "disk-new")})
        assert refused["error"]["code"] == -32603 and "store unavailable" in refused["error"]["message"]

        filler.unlink()
        for task_id in runs:
            done = wait_state(server, "test-runner", task_id, "TASK_STATE_COMPLETED", timeout=60)
            assert len(done["artifacts"][0]["parts"]) == 8, "every event the agent sent while the disk was full is stored"
            view = claim_view(server, "test-runner", task_id)
            ops = operations(view)
            assert (view["state"], ops.count("claim"), ops[-1]) == ("completed", 1, "complete"), ops
            assert "invalidate" not in ops, "the turn ran once, in the process that started it"
        wait_for(lambda: readiness(server).status_code == 200, timeout=30, what="readiness once writes succeed")

        retried = rpc(server.agent("test-runner"), "SendMessage", {"message": padded(FULL_SUITE, "disk-new")})
        assert retried["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", "a refused send may be retried"
    finally:
        server.stop()


def test_a_store_file_taken_away_stops_writes_and_fails_readiness(tmp_path: Path) -> None:
    store = tmp_path / "bridge.db"
    server = ServerProcess(f"sqlite:///{store}", pace=0.05).start()
    try:
        waiting = start_deploys(server, "gone", 1)[0]
        for path in tmp_path.glob("bridge.db*"):
            path.unlink()
        gone = wait_for(lambda: readiness(server).status_code == 503 and readiness(server), timeout=10, what="readiness to fail")
        assert "removed or replaced" in gone.json()["reason"]

        refused = rpc(server.agent("test-runner"), "SendMessage", {"message": user_message(FULL_SUITE, "gone-new")})
        assert refused["error"]["code"] == -32603 and "store unavailable" in refused["error"]["message"]
        approve = httpx.post(f"{server.agent('deployer')}/approve/{waiting}", headers=OPERATOR, timeout=10)
        assert approve.status_code == 503, "an approval is answered success only once it is stored"
        assert get_task(server, "deployer", waiting)["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    finally:
        server.stop()


def test_a_claim_left_with_its_lease_run_out_is_recovered_on_a_single_server(tmp_path: Path) -> None:
    store = tmp_path / "bridge.db"
    server = ServerProcess(f"sqlite:///{store}", pace=0.05, extra=["--lease", "3"]).start()
    try:
        task_id = start_deploys(server, "stuck", 1)[0]
        with sqlite3.connect(store, timeout=30) as db:
            changed = db.execute(
                "UPDATE bridge_tasks SET claim_state = 'claimed', lease_until = '2000-01-01 00:00:00.000000'"
                " WHERE task_id = ?",
                (task_id,),
            ).rowcount
        assert changed == 1

        def reconciling() -> dict[str, Any] | None:
            task = get_task(server, "deployer", task_id)
            return task if status_text(task) == RECONCILE_TEXT else None

        wait_for(reconciling, timeout=30, what="the lease sweep to recover the claim")
        view = claim_view(server, "deployer", task_id)
        assert (view["state"], operations(view)[-1]) == ("needs_reconciliation", "invalidate")
    finally:
        server.stop()
