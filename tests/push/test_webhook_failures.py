"""A webhook that keeps failing is logged once per config, not once per event, and never with a traceback: a task with
five configs at a closed port on 127.0.0.1 and one working receiver runs a turn of about ten events; and, on a
stepping clock, the lines that follow come at a doubling interval."""

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2a.types import TaskPushNotificationConfig

from a2a_bridge.capture.replay import WebhookReceiver
from a2a_bridge.push.webhooks import FIRST_REPEAT, FailureLog
from tests.claim_support import UNIT_TESTS
from tests.support import LOOPBACK_WEBHOOKS, ServerProcess, rpc, user_message, wait_for

FAILING = 5


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 bound but not listening, so that connections to it are refused and no other process can
    take it meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_failing_webhooks_are_logged_once_per_config_without_a_traceback(tmp_path: Path, closed_port: int) -> None:
    log = tmp_path / "server.log"
    server = ServerProcess("memory", pace=0.02, extra=LOOPBACK_WEBHOOKS, log=log).start()
    runner = server.agent("test-runner")
    try:
        with WebhookReceiver() as receiver:
            asked = rpc(runner, "SendMessage", {"message": user_message("Run the unit tests", "hooks-ask")})
            task_id = asked["result"]["task"]["id"]
            urls = [f"http://127.0.0.1:{closed_port}/dead-{n}" for n in range(FAILING)] + [f"{receiver.base}/alive"]
            for number, url in enumerate(urls):
                config = {"taskId": task_id, "id": f"hook-{number}", "url": url}
                assert "result" in rpc(runner, "CreateTaskPushNotificationConfig", config)
            follow_up = user_message(UNIT_TESTS, "hooks-follow-up", taskId=task_id)
            assert rpc(runner, "SendMessage", {"message": follow_up})["result"]["task"]["status"]["state"] == (
                "TASK_STATE_COMPLETED"
            )

            def all_sent() -> int | None:
                states = [b'"TASK_STATE_COMPLETED"' in d.body for d in receiver.received()]
                return len(states) if states and states[-1] else None

            events = wait_for(all_sent, what="the working receiver to get every event")

            def failure_lines() -> list[str] | None:
                lines = [line for line in log.read_text().splitlines() if "webhook hook-" in line]
                return lines if len(lines) >= FAILING else None

            lines = wait_for(failure_lines, what="a line per failing webhook")
    finally:
        server.stop()
    assert events >= 5, "the turn must send several events for the count to mean anything"
    assert sorted(line.split("webhook ")[1].split(" ")[0] for line in lines) == [f"hook-{n}" for n in range(FAILING)]
    assert all("failed: ConnectError" in line for line in lines), lines
    text = log.read_text()
    assert "Traceback" not in text and "push-notification" not in text and "/dead-" not in text


def test_a_webhook_that_keeps_failing_is_logged_again_with_a_doubling_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    failures = FailureLog(clock=lambda: now[0])
    config = TaskPushNotificationConfig(id="hook-0", url="http://127.0.0.1:9/secret-path?token=s3cret")
    caplog.set_level(logging.INFO, logger="a2a_bridge.push.webhooks")
    lines_at: list[float] = []
    while now[0] < 1000:
        before = len(caplog.records)
        failures.failed("task-1", config, "ConnectError")
        if len(caplog.records) > before:
            lines_at.append(now[0])
        now[0] += 1
    assert lines_at == [0, FIRST_REPEAT, FIRST_REPEAT * 3, FIRST_REPEAT * 7, FIRST_REPEAT * 15]
    assert "60 failures since the last line, 61 in all" in caplog.records[1].getMessage()
    failures.delivered("task-1", config)
    assert "delivers again after 1000 failures" in caplog.records[-1].getMessage()
    failures.failed("task-1", config, "HTTP 500")
    assert "failed: HTTP 500" in caplog.records[-1].getMessage()
    assert not [r for r in caplog.records if "secret" in r.getMessage() or r.exc_info]
