"""`a2a-bridge plan` against a real server: its log's decisions line by line (ids and addresses aside), the operator
approving through the link the planner prints, `--approve`, the approval timeout, and a deploy it holds back."""

import asyncio
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from a2a_bridge.capture.planner import PlanContext, Planner
from tests.support import DEPLOYER_TOKEN, ServerProcess

OPERATOR_TOKEN = "ops_demo_5b9e"
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
AGENT_BASE = re.compile(r"http://[^/\s]+(?:/(?:test-runner|code-reviewer|deployer))?")
SHORT_ID = re.compile(r"task ([0-9a-f]{8}) is")

DECISIONS = [
    "card test-runner: skills run-tests; JSONRPC at {agent}/a2a/jsonrpc",
    "card code-reviewer: skills review-diff, answer-question; JSONRPC at {agent}/a2a/jsonrpc",
    "card deployer: skills deploy; JSONRPC at {agent}/a2a/jsonrpc",
    "delegate run-tests to test-runner",
    "  task {id} is TASK_STATE_COMPLETED",
    "tests: 13 passed",
    "delegate review-diff to code-reviewer",
    "  task {id} is TASK_STATE_INPUT_REQUIRED",
    "  it asks: Which base branch should I compare this diff against? The planner answers from its own context: main",
    "  task {id} is TASK_STATE_COMPLETED",
    "review: 1 finding, 0 blocking",
    "delegate deploy to deployer",
    "  task {id} is TASK_STATE_AUTH_REQUIRED",
    "  it needs approval: An operator must approve this deploy at {agent}/approve/{id} The planner cannot approve, so"
    " it asks the operator and subscribes.",
    "  the stream ends at TASK_STATE_COMPLETED",
    "deploy: TASK_STATE_COMPLETED",
]
"""What the planner decides on a passing commit and a diff with one low finding, as the kit's 19-planner.log does."""


def normalized(line: str) -> str:
    """A log line with ids and agent addresses replaced, so runs and layouts compare."""
    line = UUID.sub("{id}", AGENT_BASE.sub("{agent}", line))
    return SHORT_ID.sub("task {id} is", line)


class PlanProcess:
    """`a2a-bridge plan` in a subprocess, its stdout read line by line with a deadline."""

    def __init__(self, server: ServerProcess, *extra: str) -> None:
        cmd = [sys.executable, "-m", "a2a_bridge", "plan", "--url", server.url, "--token", DEPLOYER_TOKEN, *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def until(self, wanted: str, timeout: float = 30.0) -> str:
        """Read lines until one contains `wanted`; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"the planner exited before {wanted!r}; it printed {self.seen}")
            self.seen.append(line)
            if wanted in line:
                return line
        raise AssertionError(f"no line with {wanted!r} within {timeout} s; the planner printed {self.seen}")

    def finish(self, timeout: float = 30.0) -> tuple[int, list[str]]:
        """Wait for the planner to exit; its exit code and every line it printed."""
        code = self.proc.wait(timeout)
        while (line := self.lines.get(timeout=timeout)) is not None:
            self.seen.append(line)
        return code, self.seen


def approval_link(line: str) -> str:
    match = re.search(r"(http://\S+/approve/\S+)", line)
    assert match, line
    return match.group(1)


def test_the_kits_planner_log_makes_these_decisions(kit: Path) -> None:
    kit_log = (kit / "19-planner.log").read_text(encoding="utf-8").splitlines()
    assert [normalized(line) for line in kit_log] == DECISIONS


def test_the_planner_logs_the_kits_decisions_while_an_operator_approves(server: ServerProcess) -> None:
    planner = PlanProcess(server, "--approval-timeout", "30")
    asking = planner.until("it needs approval")
    assert httpx.post(approval_link(asking), json={}, timeout=10).status_code == 200
    code, lines = planner.finish()

    assert code == 0
    assert [normalized(line) for line in lines] == DECISIONS
    review_ids = SHORT_ID.findall("\n".join(lines[7:10]))
    assert len(review_ids) == 2 and review_ids[0] == review_ids[1]
    deploy_id = SHORT_ID.findall(lines[12])[0]
    assert approval_link(asking).rsplit("/", 1)[1].startswith(deploy_id)
    assert approval_link(asking).startswith(server.agent("deployer") + "/approve/")


def test_with_approve_the_planner_plays_the_operator(server: ServerProcess) -> None:
    code, lines = PlanProcess(server, "--approve", "--operator-token", OPERATOR_TOKEN).finish()
    assert code == 0
    demo = [line for line in lines if "as a demo" in line]
    assert len(demo) == 1 and demo[0].endswith(" answered 200")
    assert approval_link(demo[0]).startswith(server.agent("deployer") + "/approve/")
    assert [normalized(line) for line in lines if "as a demo" not in line] == DECISIONS


def test_without_an_approval_the_planner_stops_waiting_at_its_timeout(server: ServerProcess) -> None:
    started = time.monotonic()
    code, lines = PlanProcess(server, "--approval-timeout", "1").finish()
    assert code == 1
    assert time.monotonic() - started >= 1
    assert lines[-2:] == [
        "  nobody acted within 1 s, so the planner stops waiting.",
        "deploy: TASK_STATE_AUTH_REQUIRED",
    ]
    assert not any("the stream ends" in line for line in lines)


def test_without_the_deployer_token_the_deploy_is_not_done(server: ServerProcess) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "a2a_bridge", "plan", "--url", server.url], capture_output=True, text=True, timeout=60
    )
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1
    assert lines[-2].startswith("  the call failed: ") and "401" in lines[-2]
    assert lines[-1] == "deploy: not done"


def test_the_planner_holds_the_deploy_when_tests_fail(server: ServerProcess) -> None:
    lines: list[str] = []

    async def run() -> bool:
        async with httpx.AsyncClient(timeout=30) as http:
            planner = Planner(http, lines.append, PlanContext(commit="9f3c2e1"))
            return await planner.run([server.agent(name) for name in ("test-runner", "code-reviewer", "deployer")])

    assert asyncio.run(run()) is False
    assert "tests: 1 failed, 11 passed" in lines
    assert lines[-1] == "deploy: not delegated, because tests failed"
    assert "delegate deploy to deployer" not in lines


def test_the_planner_answers_only_from_its_context() -> None:
    context = PlanContext()
    assert context.answer("Which base branch should I compare this diff against?") == "main"
    assert context.answer("Which commit should I test?") == context.commit
    assert context.answer("Which build should I deploy?") == context.build
    assert context.answer("What is your favourite colour?") is None
