"""`serve --log-json`: every stderr line is one JSON object, and every line about a task carries its id, agent and
claim generation; `serve --trace`: OpenTelemetry spans of the SDK's request handling, off without the flag; uvicorn's
access lines at info and below only."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from tests.claim_support import OPERATOR, UNIT_TESTS, approve, start, start_deploys, wait_state
from tests.support import ServerProcess, rpc, user_message, wait_for


class CapturedServer(ServerProcess):
    """A server whose stderr and stdout go to files."""

    def __init__(self, store: str, stderr: Path, stdout: Path, extra: list[str]) -> None:
        super().__init__(store, pace=0.2, extra=extra)
        self.stderr = stderr
        self.stdout = stdout
        self.files: list[IO[bytes]] = []

    def start(self) -> "CapturedServer":
        cmd = [sys.executable, "-m", "a2a_bridge", "serve", "--port", str(self.port), "--store", self.store,
               "--pace", str(self.pace), *self.extra]
        self.files = [self.stderr.open("ab"), self.stdout.open("ab")]
        self.proc = subprocess.Popen(cmd, stderr=self.files[0], stdout=self.files[1], env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wait_for(self._up, timeout=30, what="server start")
        return self

    def stop(self) -> None:
        super().stop()
        for file in self.files:
            file.close()


def test_every_line_is_json_and_task_lines_name_their_task(tmp_path: Path) -> None:
    stderr = tmp_path / "stderr.log"
    server = CapturedServer(f"sqlite:///{tmp_path / 'b.db'}", stderr, tmp_path / "stdout.log", ["--log-json", "--log-level", "info"])
    server.start()
    try:
        reply = rpc(server.agent("test-runner"), "SendMessage", {"message": user_message(UNIT_TESTS, "logs-unit")})
        tested = reply["result"]["task"]["id"]
        assert httpx.get(f"{server.agent('test-runner')}/tasks/{tested}/status", timeout=10).status_code == 200
        [deployed] = start_deploys(server, "logs-deploy", 1)
        approve(server, deployed)
        wait_state(server, "deployer", deployed, "TASK_STATE_COMPLETED")
        assert httpx.get(f"{server.url}/console/api/tasks/{deployed}", headers=OPERATOR, timeout=10).status_code == 200
    finally:
        server.stop()

    lines = [json.loads(line) for line in stderr.read_text().splitlines()]
    assert lines, "the server logged nothing"
    for line in lines:
        assert {"timestamp", "level", "logger", "message"} <= set(line), line
        assert line["timestamp"].endswith("Z")
    for task_id in (tested, deployed):
        about = [line for line in lines if task_id in line["message"] or line.get("task_id") == task_id]
        assert about, f"no line about {task_id}"
        for line in about:
            assert line.get("task_id") == task_id, line
            assert line["agent"] in ("test-runner", "deployer")
            assert isinstance(line["claim_generation"], int), line

    def messages(task_id: str) -> list[tuple[str, int]]:
        return [(line["message"], line["claim_generation"]) for line in lines if line.get("logger") == "a2a_bridge.tasks" and line["task_id"] == task_id]

    assert messages(tested) == [("turn started", 1), ("turn ended", 1)]
    assert messages(deployed) == [("turn started", 1), ("turn ended", 1), ("turn started", 2), ("turn ended", 2)]
    [approval] = [line for line in lines if f"POST /deployer/approve/{deployed}" in line["message"]]
    assert (approval["logger"], approval["agent"], approval["claim_generation"]) == ("uvicorn.access", "deployer", 1)
    [status] = [line for line in lines if f"/test-runner/tasks/{tested}/status" in line["message"]]
    assert (status["agent"], status["claim_generation"]) == ("test-runner", 1)
    untied = [line for line in lines if "task_id" not in line]
    assert any("Application startup complete" in line["message"] for line in untied)


def test_plain_text_lines_about_a_task_name_it(tmp_path: Path) -> None:
    stderr = tmp_path / "stderr.log"
    server = CapturedServer(f"sqlite:///{tmp_path / 'b.db'}", stderr, tmp_path / "stdout.log", ["--log-level", "info"])
    server.start()
    try:
        reply = rpc(server.agent("test-runner"), "SendMessage", {"message": user_message(UNIT_TESTS, "plain-unit")})
        tested = reply["result"]["task"]["id"]
        [deployed] = start_deploys(server, "plain-deploy", 1)
        canceled = httpx.post(f"{server.agent('deployer')}/tasks/{deployed}/cancel", headers=OPERATOR, timeout=30)
        assert canceled.json()["state"] == "TASK_STATE_CANCELED"
    finally:
        server.stop()

    lines = stderr.read_text().splitlines()
    tagged = {
        task_id: [line.split("] ", 1)[1] for line in lines if f"[agent={agent} task={task_id} gen=1]" in line]
        for agent, task_id in (("test-runner", tested), ("deployer", deployed))
    }
    assert tagged[tested] == ["turn started", "turn ended"], lines
    assert tagged[deployed][:2] == ["turn started", "turn ended"] and "cancel requested" in tagged[deployed], lines
    assert any(line.endswith(" a2a_bridge.tasks [agent=test-runner task=" + tested + " gen=1] turn started") for line in lines)


def spans(stdout: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.read_text().splitlines() if line.startswith("{")]


def test_trace_exports_the_sdks_spans_and_is_off_without_it(tmp_path: Path) -> None:
    traced, plain = tmp_path / "traced.out", tmp_path / "plain.out"
    for stdout, extra in ((traced, ["--trace"]), (plain, [])):
        server = CapturedServer("memory", tmp_path / "stderr.log", stdout, ["--log-level", "warning", *extra])
        server.start()
        try:
            task = start(server, "test-runner", user_message(UNIT_TESTS, "trace-unit"))
            wait_state(server, "test-runner", task["id"], "TASK_STATE_COMPLETED")
        finally:
            server.stop()
    names = {span["name"] for span in spans(traced)}
    assert any(name.startswith("a2a.server.routes.jsonrpc_dispatcher") for name in names), names
    assert all(span["resource"]["attributes"]["service.name"] == "a2a-bridge" for span in spans(traced))
    assert spans(plain) == []


@pytest.mark.parametrize(("level", "access_lines"), [("info", 1), ("warning", 0)])
def test_uvicorns_access_lines_come_at_info_and_below_only(tmp_path: Path, level: str, access_lines: int) -> None:
    """At warning and above uvicorn's access log is off (it would format each request's client and path for nothing);
    at info a request gets its line, as before."""
    stderr, stdout = tmp_path / "stderr.log", tmp_path / "stdout.log"
    server = CapturedServer("memory", stderr, stdout, ["--log-level", level])
    server.start()
    try:
        assert httpx.get(f"{server.url}/healthz?access-marker", timeout=30).status_code == 200
    finally:
        server.stop()
    written = stderr.read_text() + stdout.read_text()
    lines = [line for line in written.splitlines() if "/healthz?access-marker" in line]
    assert len(lines) == access_lines, lines


def test_an_access_line_shows_a_long_path_cut_with_its_length(tmp_path: Path) -> None:
    stderr, stdout = tmp_path / "stderr.log", tmp_path / "stdout.log"
    server = CapturedServer("memory", stderr, stdout, ["--log-level", "info"])
    server.start()
    long_path = "/healthz-long-" + "x" * 20_000
    try:
        assert httpx.get(f"{server.url}{long_path}", timeout=30).status_code == 404
    finally:
        server.stop()
    written = stderr.read_text() + stdout.read_text()
    (line,) = [line for line in written.splitlines() if "/healthz-long-" in line]
    assert f'"GET {long_path[:512]}... ({len(long_path)} characters) HTTP/1.1" 404' in line
    assert len(line) < 1000
