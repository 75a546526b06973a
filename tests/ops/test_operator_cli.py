"""The operator's commands against a live server: `a2a-bridge tasks`, `status [--watch]`, `approve`, `reconcile` and
`cancel`, and the console API they ask for a task's agent; the console API's dead letters, across the agents and in a
task's view."""

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from a2a_bridge.ops.operator_cli import TOKEN_ENV
from tests.claim_support import (
    CRASH_PACE,
    FULL_SUITE,
    OPERATOR,
    UNIT_TESTS,
    claim_view,
    crash_mid_rollout,
    get_task,
    headers_for,
    rollouts,
    start,
    start_deploys,
    status_text,
    wait_state,
)
from tests.support import DEPLOYER_TOKEN, LOOPBACK_WEBHOOKS, ServerProcess, free_port, rpc, user_message, wait_for
from tests.push.test_push_outbox import Receiver

DEAD_LETTERS = [*LOOPBACK_WEBHOOKS, "--webhook-retry", "0.3", "--webhook-give-up", "1"]
"""A server whose webhooks to 127.0.0.1 are retried after 0.3 s, doubling, and given up after failing for a second."""
PUSH_AGENTS = ["--agent", "test-runner", "--agent", "conformance"]
"""Two agents that take push configs (test-runner's tasks complete; so do conformance's, for a message id it does not
script)."""

PLAIN = {
    **{name: value for name, value in os.environ.items() if name not in ("FORCE_COLOR", "TTY_COMPATIBLE", TOKEN_ENV)},
    "COLUMNS": "220",
    "PYTHONIOENCODING": "utf-8",
}
"""The commands' environment: Rich's plain output (no colour codes), wide enough that no line wraps (`cli` sets
`COLUMNS` per command)."""


def cli(
    server: ServerProcess, *args: str, token: str | None = None, columns: int = 220
) -> subprocess.CompletedProcess[str]:
    """One `a2a-bridge` command against the server (the demo operator token unless `token` is given), its output
    piped, as wide as `columns`."""
    extra = ["--token", token] if token is not None else []
    return subprocess.run(
        [sys.executable, "-m", "a2a_bridge", *args, "--url", server.url, *extra],
        capture_output=True, text=True, timeout=60, env={**PLAIN, "COLUMNS": str(columns)},
    )


def ok(server: ServerProcess, *args: str, token: str | None = None, columns: int = 220) -> str:
    done = cli(server, *args, token=token, columns=columns)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A bridge whose agents take a second a step: a full suite runs long enough to cancel from a new process."""
    server = ServerProcess(f"sqlite:///{tmp_path_factory.mktemp('cli') / 'b.db'}", pace=1.0).start()
    yield server
    server.stop()


def test_tasks_shows_the_three_views_of_each_task(bridge: ServerProcess) -> None:
    [deploy] = start_deploys(bridge, "cli-tasks", 1)
    finished = start(bridge, "test-runner", user_message(UNIT_TESTS, "cli-tasks-unit"))["id"]
    wait_state(bridge, "test-runner", finished, "TASK_STATE_COMPLETED")
    out = ok(bridge, "tasks", columns=80)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    assert lines[:2] == ["tasks, newest first", f"{'task':38}{'agent':13}A2A state"]
    rows = {line.split()[0]: (line.split()[1:], lines[n + 1]) for n, line in enumerate(lines[2:], 2) if not line.startswith(" ")}
    assert rows[deploy] == (
        ["deployer", "AUTH_REQUIRED"], "    phase processing · claim awaiting_reply gen 1 · actions: approve, cancel"
    )
    assert rows[finished] == (["test-runner", "COMPLETED"], "    phase terminal (completed) · claim completed gen 1")
    assert list(rows).index(finished) < list(rows).index(deploy), "newest first"


def test_tasks_json_is_one_document_of_the_console_rows(bridge: ServerProcess) -> None:
    [deploy] = start_deploys(bridge, "cli-json", 1)
    document = json.loads(ok(bridge, "tasks", "--json", "--limit", "200", columns=80))
    [row] = [row for row in document["tasks"] if row["id"] == deploy]
    fields = {"id", "context_id", "agent", "created_at", "state", "ended", "message", "status", "claim", "actions", "waiting"}
    assert set(row) == fields
    assert (row["agent"], row["state"], row["actions"]) == ("deployer", "TASK_STATE_AUTH_REQUIRED", ["approve", "cancel"])
    assert row["claim"]["state"] == "awaiting_reply" and row["status"]["phase"] == "processing"


def test_status_renders_the_status_object(bridge: ServerProcess) -> None:
    [deploy] = start_deploys(bridge, "cli-status", 1)
    out = ok(bridge, "status", deploy)
    assert out.splitlines()[0] == f"{deploy} (deployer, for deployer-client)"
    assert out.splitlines()[1].startswith("revision ") and out.splitlines()[1].endswith(": processing")
    as_owner = ok(bridge, "status", deploy, "--agent", "deployer", token=DEPLOYER_TOKEN)
    assert as_owner == out
    assert ok(bridge, "status", deploy, "--agent", "deployer") == out, "the operator reads any agent's task"
    wrong_agent = cli(bridge, "status", deploy, "--agent", "test-runner")
    assert wrong_agent.returncode == 1
    assert wrong_agent.stderr.strip() == f"error: {deploy} is a task of deployer, not of test-runner"
    stranger = cli(bridge, "status", deploy, "--agent", "deployer", token="not-a-token")
    assert stranger.returncode == 1 and f"GET /deployer/tasks/{deploy}/status: 401 " in stranger.stderr


def test_status_watch_follows_a_deploy_that_approve_resumes(bridge: ServerProcess) -> None:
    [deploy] = start_deploys(bridge, "cli-watch", 1)
    command = [sys.executable, "-m", "a2a_bridge", "status", deploy, "--watch", "--url", bridge.url]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=PLAIN) as watch:
        assert watch.stdout is not None
        assert watch.stdout.readline().startswith(f"watching {deploy};")
        assert watch.stdout.readline().rstrip().endswith(": processing")
        approved = ok(bridge, "approve", deploy)
        out, err = watch.communicate(timeout=30)
    assert watch.returncode == 0, err
    assert approved.strip() == f"approved {deploy} (deployer): the deploy resumes"
    lines = out.splitlines()
    assert lines[-1] == "the task has ended"
    assert lines[-2].endswith(": terminal (completed)")
    assert all(": processing" in line for line in lines[:-2]), lines
    assert wait_state(bridge, "deployer", deploy, "TASK_STATE_COMPLETED")


def test_cancel_stops_any_callers_task_in_the_operators_name(bridge: ServerProcess) -> None:
    task_id = start(bridge, "test-runner", user_message(FULL_SUITE, "cli-cancel"))["id"]
    wait_state(bridge, "test-runner", task_id, "TASK_STATE_WORKING")
    assert ok(bridge, "cancel", task_id).strip() == f"canceled {task_id} (test-runner)"
    assert status_text(get_task(bridge, "test-runner", task_id)) == "Canceled by the operator."
    events = claim_view(bridge, "test-runner", task_id)["events"]
    assert {"operation": "request_cancel", "evidence": {"requested_by": "operator"}}.items() <= next(
        e for e in events if e["operation"] == "request_cancel"
    ).items()
    again = cli(bridge, "cancel", task_id)
    assert again.returncode == 1
    assert "409 Task cannot be canceled" in again.stderr


def test_approve_and_cancel_keep_the_operators_reason_in_the_claim_evidence(bridge: ServerProcess) -> None:
    [deploy] = start_deploys(bridge, "cli-reason", 1)
    assert ok(bridge, "approve", deploy, "--reason", "change window 14:00").startswith(f"approved {deploy}")
    resumed = next(e for e in claim_view(bridge, "deployer", deploy)["events"] if e["operation"] == "resume")
    assert resumed["evidence"]["reason"] == "change window 14:00"
    task_id = start(bridge, "test-runner", user_message(FULL_SUITE, "cli-cancel-reason"))["id"]
    wait_state(bridge, "test-runner", task_id, "TASK_STATE_WORKING")
    assert ok(bridge, "cancel", task_id, "--reason", "wrong commit").startswith(f"canceled {task_id}")
    asked = next(e for e in claim_view(bridge, "test-runner", task_id)["events"] if e["operation"] == "request_cancel")
    assert asked["evidence"] == {"requested_by": "operator", "reason": "wrong commit"}
    too_long = cli(bridge, "cancel", task_id, "--reason", "x" * 501)
    assert too_long.returncode == 2 and "at most 500 characters" in too_long.stderr


def test_commands_explain_what_the_server_refused(bridge: ServerProcess) -> None:
    unknown = cli(bridge, "approve", "no-such-task")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "error: GET /console/api/tasks/no-such-task: 404 Task not found"
    stranger = cli(bridge, "tasks", token="not-a-token")
    assert stranger.returncode == 1
    assert "401 Send Authorization: Bearer <operator token>" in stranger.stderr
    not_operator = cli(bridge, "tasks", token=DEPLOYER_TOKEN)
    assert "403 The console is for the operator" in not_operator.stderr
    finished = start(bridge, "test-runner", user_message(UNIT_TESTS, "cli-refused"))["id"]
    wait_state(bridge, "test-runner", finished, "TASK_STATE_COMPLETED")
    refused = cli(bridge, "approve", finished, "--agent", "deployer")
    assert refused.returncode == 1 and "404 Task not found" in refused.stderr


def test_the_console_api_is_the_operators(bridge: ServerProcess) -> None:
    assert httpx.get(f"{bridge.url}/console/api/tasks", timeout=10).status_code == 401
    assert httpx.get(f"{bridge.url}/console/api/tasks", headers={"Authorization": f"Bearer {DEPLOYER_TOKEN}"}, timeout=10).status_code == 403
    assert httpx.get(f"{bridge.url}/console/api/tasks?limit=0", headers=OPERATOR, timeout=10).status_code == 400
    assert httpx.get(f"{bridge.url}/console/api/info", timeout=10).json()["demo"] is True
    page = httpx.get(f"{bridge.url}/console/", timeout=10)
    assert page.status_code == 200 and "operator console" in page.text
    cancel = httpx.post(f"{bridge.url}/test-runner/tasks/anything/cancel", timeout=10)
    assert cancel.status_code == 404


def test_the_change_feed_pushes_a_row_when_its_task_changes(bridge: ServerProcess) -> None:
    frames: list[dict[str, Any]] = []
    with httpx.stream("GET", f"{bridge.url}/console/api/stream", headers=OPERATOR, timeout=30) as feed:
        task_id = ""
        for line in feed.iter_lines():
            if not line.startswith("data:"):
                continue
            frames.append(json.loads(line.removeprefix("data:")))
            if len(frames) == 1:
                assert frames[0]["snapshot"] is True
                task_id = start(bridge, "test-runner", user_message(UNIT_TESTS, "cli-feed"))["id"]
            elif any(row["id"] == task_id and row["state"] == "TASK_STATE_COMPLETED" for row in frames[-1]["tasks"]):
                break
    later = [row for frame in frames[1:] for row in frame["tasks"]]
    assert all(frame["snapshot"] is False for frame in frames[1:])
    assert {row["id"] for row in later} == {task_id}
    assert later[-1]["claim"]["state"] == "completed" and later[-1]["status"]["phase"] == "terminal"


def test_reconcile_reports_an_outcome_with_evidence(tmp_path: Path) -> None:
    ledger = tmp_path / "deploys.jsonl"
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", pace=CRASH_PACE, extra=["--deploy-ledger", str(ledger)]).start()
    try:
        task_id = crash_mid_rollout(server, "cli-crash")
        assert "needs_reconciliation" in ok(server, "tasks")
        missing = cli(server, "reconcile", task_id, "--outcome", "completed")
        assert missing.returncode == 2 and "--evidence" in missing.stderr
        out = ok(server, "reconcile", task_id, "--outcome", "completed", "--evidence", "note=checked staging", "checked_by=cli")
        assert out.strip() == f"reconciled {task_id} (deployer) as completed: claim completed, generation 2"
        event = claim_view(server, "deployer", task_id)["events"][-1]
        assert event["operation"] == "reconcile_completed"
        assert event["evidence"] == {"note": "checked staging", "checked_by": "cli"}
        assert rollouts(ledger)[task_id] == 0
    finally:
        server.stop()


def hooked(server: ServerProcess, agent: str, text: str, hook: str, config_id: str) -> str:
    """A task of `agent` with one push config, `config_id`, to `hook`, sent without waiting; its id."""
    params = {
        "message": user_message(text, f"hooked-{uuid.uuid4()}"),
        "configuration": {"returnImmediately": True, "taskPushNotificationConfig": {"id": config_id, "url": hook}},
    }
    reply = rpc(server.agent(agent), "SendMessage", params, headers=headers_for(agent))
    assert "result" in reply, reply
    return reply["result"]["task"]["id"]


def console_dead_letters(server: ServerProcess) -> list[dict[str, Any]]:
    answer = httpx.get(f"{server.url}/console/api/webhooks/dead", headers=OPERATOR, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["deadLetters"]


def dead_lettered(server: ServerProcess, task_ids: list[str]) -> list[dict[str, Any]]:
    """The console's dead letters once every one of these tasks has one."""

    def listed() -> list[dict[str, Any]] | None:
        letters = console_dead_letters(server)
        return letters if {letter["taskId"] for letter in letters} >= set(task_ids) else None

    return wait_for(listed, timeout=30, interval=0.1, what="the dead letters")


def console_task(server: ServerProcess, task_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{server.url}/console/api/tasks/{task_id}", headers=OPERATOR, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hooks = Receiver()
    yield hooks
    hooks.down()


def test_the_console_api_lists_dead_letters_across_agents_and_in_their_task(tmp_path: Path, receiver: Receiver) -> None:
    """A receiver answering 500 past --webhook-give-up: each agent's dead letter in the console's list (the operator's
    only) and in its task's view, until an operator delivers it again to the receiver, now answering 200."""
    receiver.answer = 500
    receiver.up()
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", pace=0.05, extra=[*PUSH_AGENTS, *DEAD_LETTERS]).start()
    try:
        run = hooked(server, "test-runner", UNIT_TESTS, receiver.url, "ci-hook")
        other = hooked(server, "conformance", "Hello", receiver.url, "tck-hook")
        plain = start(server, "test-runner", user_message(UNIT_TESTS, f"unhooked-{uuid.uuid4()}"))["id"]
        letters = dead_lettered(server, [run, other])
        assert [(letter["agent"], letter["taskId"], letter["configId"]) for letter in letters if letter["taskId"] == run] == [
            ("test-runner", run, "ci-hook")
        ]
        assert {letter["agent"] for letter in letters} == {"test-runner", "conformance"}
        [letter] = [letter for letter in letters if letter["taskId"] == run]
        attempted = {r.revision for r in receiver.got() if r.task_id == run}
        assert attempted == {min(attempted)} and min(attempted) > letter["deliveredRevision"], "stopped at one revision"
        assert letter["dead"] is True and letter["nextAttempt"] is None and letter["lastError"] == "HTTP 500"
        assert letter["attempts"] == sum(1 for r in receiver.got() if r.task_id == run) >= 2
        assert datetime.fromisoformat(letter["failingSince"]) <= datetime.now(UTC)
        times = [letter["failingSince"] for letter in letters]
        assert times == sorted(times, reverse=True), "the latest to start failing first"

        assert console_task(server, run)["webhooks"] == [{k: v for k, v in letter.items() if k != "agent"}]
        assert console_task(server, plain)["webhooks"] == []
        assert httpx.get(f"{server.url}/console/api/webhooks/dead", timeout=10).status_code == 401

        receiver.answer = 200
        again = httpx.post(
            f"{server.url}/test-runner/tasks/{run}/webhooks/redeliver", json={"configId": "ci-hook"}, headers=OPERATOR, timeout=10
        )
        assert again.status_code == 200, again.text
        wait_for(lambda: receiver.ended([run]), timeout=30, what="the terminal state after the redelivery")
        wait_for(lambda: console_task(server, run)["webhooks"] == [], timeout=30, what="the delivery done with")
        assert [letter["taskId"] for letter in console_dead_letters(server)] == [other]
    finally:
        server.stop()


def test_the_server_comes_from_a2a_bridge_url_as_the_token_from_a2a_bridge_token(bridge: ServerProcess) -> None:
    """`--url` may be left out when `$A2A_BRIDGE_URL` names the server; a `--url` given wins; a bad value is one line."""
    def run(*args: str, url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "a2a_bridge", "tasks", "--json", *args],
            capture_output=True, text=True, timeout=60, env={**PLAIN, "A2A_BRIDGE_URL": url},
        )

    from_env = run(url=bridge.url)
    assert from_env.returncode == 0, from_env.stderr
    assert from_env.stdout == ok(bridge, "tasks", "--json")
    unreachable = f"http://127.0.0.1:{free_port()}"
    assert run("--url", bridge.url, url=unreachable).returncode == 0
    refused = run(url=unreachable)
    assert refused.returncode == 1 and unreachable in refused.stderr
    bad = run(url="ftp://nowhere")
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr.startswith("error: $A2A_BRIDGE_URL: expected an http:// or https:// URL") and bad.stderr.count("\n") == 1
