"""A turn longer than its lease renews it while it runs; an agent opens an operation window for a long step: the claim
names the stage and its lease covers the window."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from a2a_bridge.agents.deployer import ROLLOUT_WINDOW_SECONDS
from tests.claim_support import (
    FULL_SUITE,
    OPERATOR,
    approve,
    claim_view,
    operations,
    parse_iso,
    rolling_out,
    start,
    start_deploys,
    wait_state,
)
from tests.support import ServerProcess, user_message, wait_for

SHORT_LEASE = 1.5
"""Seconds of a claim's lease in the renewal test: the full suite's turn (8 steps of 0.5 s) outlasts two leases."""


@pytest.fixture
def slow_deployer(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(f"sqlite:///{tmp_path}/window.db", pace=1.5).start()
    yield server
    server.stop()


def test_a_rollout_runs_under_a_named_operation_window(slow_deployer: ServerProcess) -> None:
    (task_id,) = start_deploys(slow_deployer, "window", 1)
    approve(slow_deployer, task_id)
    wait_for(lambda: rolling_out(slow_deployer, task_id), what="the rollout")
    view = wait_for(
        lambda: (v := claim_view(slow_deployer, "deployer", task_id, OPERATOR))["stage"] == "rollout" and v,
        what="the operation window",
    )
    assert view["state"] == "claimed"
    lease_until = parse_iso(view["lease_until"])
    left = lease_until - datetime.now(UTC)
    assert timedelta(seconds=ROLLOUT_WINDOW_SECONDS - 30) < left <= timedelta(seconds=ROLLOUT_WINDOW_SECONDS)
    window = [e for e in view["events"] if e["operation"] == "open_window"]
    assert window and window[-1]["evidence"] == {"stage": "rollout", "seconds": ROLLOUT_WINDOW_SECONDS}
    done = wait_state(slow_deployer, "deployer", task_id, "TASK_STATE_COMPLETED")
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert claim_view(slow_deployer, "deployer", task_id, OPERATOR)["lease_until"] is None


def test_a_turn_longer_than_its_lease_renews_it_while_it_runs(tmp_path: Path) -> None:
    server = ServerProcess(f"sqlite:///{tmp_path}/lease.db", pace=0.5, extra=["--lease", str(SHORT_LEASE)]).start()
    try:
        task = start(server, "test-runner", user_message(FULL_SUITE, "lease-renewed-1"))

        def renewed() -> dict | None:
            view = claim_view(server, "test-runner", task["id"], headers={})
            return view if view["state"] == "claimed" and operations(view).count("renew") >= 2 else None

        view = wait_for(renewed, timeout=30, what="the running turn to renew its lease twice")
        lease_until = parse_iso(view["lease_until"])
        assert lease_until > datetime.now(UTC), "a renewed lease reaches past now"
        wait_state(server, "test-runner", task["id"], "TASK_STATE_COMPLETED")
        view = claim_view(server, "test-runner", task["id"], headers={})
        assert view["state"] == "completed" and view["lease_until"] is None
        assert operations(view)[:2] == ["create", "claim"] and operations(view)[-1] == "complete"
        assert "invalidate" not in operations(view)
        renewals = [event for event in view["events"] if event["operation"] == "renew"]
        assert all(event["evidence"] == {"renewed_by": "bridge"} and event["claim_generation"] == 1 for event in renewals)
    finally:
        server.stop()
