"""The operator console in headless Chromium (Debian's `chromium`, driven by `playwright-core` from tests/browser/):
a deploy shown live up to AUTH_REQUIRED and approved with a click, a running task canceled, and a deploy left in
needs_reconciliation by a crash reconciled from its page. Screenshots go to build/console/."""

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.claim_support import (
    CRASH_PACE,
    claim_view,
    crash_mid_rollout,
    get_task,
    rollouts,
)
from tests.support import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
BROWSER_DIR = ROOT / "tests" / "browser"
PLAYWRIGHT = BROWSER_DIR / "node_modules" / "playwright-core"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = ROOT / "build" / "console"


@pytest.fixture(scope="module")
def node() -> str:
    """`node` with playwright-core installed and Chromium present; skips locally without them, fails under CI."""
    executable = shutil.which("node")
    missing = [
        what
        for what, present in (
            ("node", executable is not None),
            (f"{PLAYWRIGHT} (run: npm ci --prefix tests/browser)", PLAYWRIGHT.is_dir()),
            (f"{CHROMIUM} (apt-get install chromium)", CHROMIUM.is_file()),
        )
        if not present
    ]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"missing {', '.join(missing)}; .ci/run installs them")
        pytest.skip(f"missing {', '.join(missing)}")
    assert executable is not None
    return executable


def drive(node: str, *args: str) -> dict[str, dict[str, Any]]:
    """Run tests/browser/console.mjs; each step it reports, by name."""
    proc = subprocess.run(
        [node, "console.mjs", *args], cwd=BROWSER_DIR, capture_output=True, text=True, timeout=180,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    errors = [line for line in lines if "error" in line or line.get("step") == "page-error"]
    assert proc.returncode == 0 and not errors, proc.stdout + proc.stderr
    return {line["step"]: line for line in lines}


@pytest.fixture(scope="module")
def live_run(node: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """The `live` scenario once, against a bridge whose agents take a second a step, so each state shows."""
    server = ServerProcess(f"sqlite:///{tmp_path_factory.mktemp('console') / 'b.db'}", pace=1.0).start()
    try:
        yield drive(node, "live", server.url, str(SCREENSHOTS))
    finally:
        server.stop()


def test_sign_in_names_the_demo_token_and_refuses_another(live_run: dict[str, dict[str, Any]]) -> None:
    sign_in = live_run["sign-in"]
    assert "ops_demo_5b9e" in sign_in["hint"] and "--operator-token" in sign_in["hint"]
    assert sign_in["refused"] == "The server did not accept that token."
    assert sign_in["stored"] == "ops_demo_5b9e"


def test_a_deploy_shows_up_live_and_completes_once_approved(live_run: dict[str, dict[str, Any]]) -> None:
    step = live_run["approve"]
    assert [state for state in step["states"] if state != "WORKING"] == ["AUTH_REQUIRED", "COMPLETED"], step["states"]
    assert "WORKING" in step["states"], "the row never showed the deploy working"
    assert step["waiting"] == {"phase": "processing", "claim": "awaiting_reply", "generation": "1", "actions": ["approve", "cancel"]}
    assert step["done"] == {"phase": "terminal (completed)", "claim": "completed", "generation": "2", "actions": []}
    assert step["notice"].startswith("Approved ")
    assert step["sameDocument"] is True


def test_the_task_page_shows_history_artifacts_and_claim_events(live_run: dict[str, dict[str, Any]]) -> None:
    page = live_run["task-page"]
    assert page["state"] == "COMPLETED"
    assert page["history"] == 4
    assert page["artifacts"] == ["deploy-report"]
    assert json.loads(page["report"])["environment"] == "staging"
    assert page["operations"] == ["create", "claim", "ask", "resume", "open_window", "complete"]


def test_a_running_task_is_canceled_with_a_click(live_run: dict[str, dict[str, Any]]) -> None:
    step = live_run["cancel"]
    assert step["states"][0] in ("SUBMITTED", "WORKING") and step["states"][-1] == "CANCELED", step["states"]
    assert step["claim"] == "cancelled"
    assert step["message"] == "Canceled at the client's request."
    assert step["actions"] == []
    assert step["sameDocument"] is True


def test_a_deploy_interrupted_by_a_crash_is_reconciled_from_its_page(node: str, tmp_path: Path) -> None:
    ledger = tmp_path / "deploys.jsonl"
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", pace=CRASH_PACE, extra=["--deploy-ledger", str(ledger)]).start()
    try:
        task_id = crash_mid_rollout(server, "console-crash")
        step = drive(node, "reconcile", server.url, str(SCREENSHOTS), task_id)["reconcile"]
        assert step["before"]["state"] == "AUTH_REQUIRED"
        assert step["before"]["claim"] == "needs reconciliation"
        assert "An operator must reconcile it" in step["before"]["message"]
        assert step["after"]["state"] == "COMPLETED"
        assert step["after"]["claim"] == "completed"
        assert step["after"]["message"] == "Reconciled by an operator: staging serves build 2026.10.06-0"
        evidence = {"note": "staging serves build 2026.10.06-0", "checked_by": "console test", "health": "3 of 3 passing"}
        assert step["after"]["evidence"] == evidence
        assert step["after"]["reconcileForm"] is False
        assert get_task(server, "deployer", task_id)["status"]["state"] == "TASK_STATE_COMPLETED"
        assert claim_view(server, "deployer", task_id)["events"][-1]["evidence"] == evidence
        assert rollouts(ledger)[task_id] == 0
    finally:
        server.stop()
