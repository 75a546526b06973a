"""Transcripts whose steps depend on timing, replayed the same way wherever a test needs their tasks."""

from collections.abc import Callable
from typing import Any

from a2a_bridge.capture.transcript import Transcript
from tests.kit_session import KitSession
from tests.support import A2A, wait_for

ACTIVE = ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")


def state(task: dict[str, Any]) -> str:
    return str(task["status"]["state"])


def polling(session: KitSession, script: Transcript) -> None:
    """04: return immediately, then GetTask until WORKING with the first log chunk, then until COMPLETED."""
    session.replay(script.block(1))
    session.poll(
        script.block(2),
        lambda body: state(body["result"]) == "TASK_STATE_WORKING" and bool(body["result"].get("artifacts")),
        "the task to be WORKING with its first log chunk",
    )
    session.poll(script.block(3), lambda body: state(body["result"]) == "TASK_STATE_COMPLETED", "the task to complete")


def cancel(session: KitSession, script: Transcript) -> None:
    """10: start the paced full suite, cancel it once it has logged as many files as the kit's cancel shows."""
    recorded = script.block(2).response
    assert recorded is not None
    chunks = len(recorded.json()["result"]["artifacts"][0]["parts"])
    task_id = session.replay(script.block(1))["result"]["task"]["id"]

    def logged() -> bool:
        task = session.client.post(
            session.server.agent("test-runner") + "/a2a/jsonrpc",
            json={"jsonrpc": "2.0", "id": 0, "method": "GetTask", "params": {"id": task_id}},
            headers=A2A,
        ).json()["result"]
        assert state(task) in ACTIVE, f"the full suite ended before the cancel: {task}"
        return any(len(artifact["parts"]) >= chunks for artifact in task.get("artifacts", []))

    wait_for(logged, timeout=20, what=f"the full suite to log {chunks} files")
    session.play(script, labels={"2", "3", "4"})


TIMED: dict[str, Callable[[KitSession, Transcript], None]] = {"04-polling": polling, "10-cancel": cancel}


def run(session: KitSession, script: Transcript) -> None:
    """Replay a whole transcript, driving the timing-dependent ones their own way."""
    TIMED.get(script.name, KitSession.play)(session, script)
