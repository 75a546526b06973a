"""An agent opens an operation window for a long step: the claim names the stage and its lease covers the window."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from a2a_bridge.agents.deployer import ROLLOUT_WINDOW_SECONDS
from tests.claim_support import OPERATOR, approve, claim_view, rolling_out, start_deploys, wait_state
from tests.support import ServerProcess, wait_for


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
    lease_until = datetime.fromisoformat(view["lease_until"].replace("Z", "+00:00"))
    left = lease_until - datetime.now(UTC)
    assert timedelta(seconds=ROLLOUT_WINDOW_SECONDS - 30) < left <= timedelta(seconds=ROLLOUT_WINDOW_SECONDS)
    window = [e for e in view["events"] if e["operation"] == "open_window"]
    assert window and window[-1]["evidence"] == {"stage": "rollout", "seconds": ROLLOUT_WINDOW_SECONDS}
    done = wait_state(slow_deployer, "deployer", task_id, "TASK_STATE_COMPLETED")
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert claim_view(slow_deployer, "deployer", task_id, OPERATOR)["lease_until"] is None
