"""Prometheus metrics at /metrics, scraped from a real server after traffic on both JSON bindings and parsed with
prometheus_client's own parser: requests by method and outcome, turn durations, open streams, store writes, webhook
deliveries and failures, stored tasks by state and phase, the session; and who may read them."""

import threading
import uuid
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

import pytest

from a2a_bridge.agents.catalog import sample_agents
from a2a_bridge.app import Bridge
from a2a_bridge.capture.replay import WebhookReceiver
from a2a_bridge.core.auth import Principal
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.security_support import ALICE, OPS, secured_server
from tests.support import A2A, LOOPBACK_WEBHOOKS, ServerProcess, rpc, rpc_stream, user_message, wait_for

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(base: str, headers: dict[str, str] | None = None) -> Samples:
    """Every sample of /metrics by (name, sorted labels), as prometheus_client's parser reads the exposition."""
    response = httpx.get(f"{base}/metrics", headers=headers or {}, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_traffic_on_both_bindings_moves_the_counters_and_fills_the_histograms(tmp_path: Path) -> None:
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", pace=0.05, extra=LOOPBACK_WEBHOOKS).start()
    try:
        with WebhookReceiver() as receiver:
            runner = server.agent("test-runner")
            hooks = {"taskPushNotificationConfig": {"url": f"{receiver.base}/hook"}}
            sent = rpc(runner, "SendMessage", {"message": user_message("Run the unit tests at commit 9f3c2e1", f"m-{uuid.uuid4()}"), "configuration": hooks})
            assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            failing = {"taskPushNotificationConfig": {"url": "http://127.0.0.1:1/hook"}}
            rpc(runner, "SendMessage", {"message": user_message("Run the unit tests at commit 9f3c2e1", f"m-{uuid.uuid4()}"), "configuration": failing})
            rest = httpx.post(
                f"{runner}/a2a/rest/message:send", headers=A2A, timeout=30,
                json={"message": user_message("Run the unit tests at commit 9f3c2e1", f"m-{uuid.uuid4()}")},
            )
            assert rest.status_code == 200 and rest.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            missing = rpc(runner, "GetTask", {"id": "no-such-task"})
            assert missing["error"]["code"] == -32001
            assert httpx.get(f"{runner}/a2a/rest/tasks/no-such-task", headers=A2A, timeout=10).status_code == 404

            frames: list[dict] = []
            streaming = threading.Thread(
                target=lambda: frames.extend(
                    rpc_stream(runner, "SendStreamingMessage", {"message": user_message("Run the full suite for payments-api at commit 9f3c2e1", f"m-{uuid.uuid4()}")})
                )
            )
            streaming.start()
            wait_for(
                lambda: value(s := scrape(server.url), "a2a_bridge_open_streams", agent="test-runner", method="SendStreamingMessage") == 1
                and value(s, "a2a_bridge_tasks_by_phase", agent="test-runner", phase="processing") == 1,
                what="the stream gauged open while its task is stored as processing",
            )
            streaming.join(30)
            assert not streaming.is_alive() and frames[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
            samples = wait_for(
                lambda: value(s := scrape(server.url), "a2a_bridge_webhook_deliveries_total", agent="test-runner", outcome="failed") > 0
                and value(s, "a2a_bridge_webhook_deliveries_total", agent="test-runner", outcome="delivered") > 0
                and value(s, "a2a_bridge_open_streams", agent="test-runner", method="SendStreamingMessage") == 0
                and s,
                what="webhook deliveries counted and the stream closed",
            )
            assert receiver.received(), "the receiver got the deliveries the counter counts"
    finally:
        server.stop()

    requests = "a2a_bridge_requests_total"
    assert value(samples, requests, agent="test-runner", method="SendMessage", outcome="ok") == 3, "two JSON-RPC, one HTTP+JSON"
    assert value(samples, requests, agent="test-runner", method="GetTask", outcome="TaskNotFoundError") == 2
    assert value(samples, requests, agent="test-runner", method="SendStreamingMessage", outcome="ok") == 1
    turns = "a2a_bridge_turn_duration_seconds"
    assert value(samples, f"{turns}_count", agent="test-runner", outcome="returned") == 4
    assert value(samples, f"{turns}_sum", agent="test-runner", outcome="returned") > 0
    assert value(samples, f"{turns}_bucket", agent="test-runner", outcome="returned", le="+Inf") == 4
    assert value(samples, "a2a_bridge_store_write_seconds_count", operation="save") >= 4
    assert value(samples, "a2a_bridge_store_write_seconds_bucket", operation="save", le="+Inf") >= 4
    assert value(samples, "a2a_bridge_tasks", agent="test-runner", state="TASK_STATE_COMPLETED") == 4
    assert value(samples, "a2a_bridge_tasks", agent="deployer", state="TASK_STATE_COMPLETED") == 0
    assert value(samples, "a2a_bridge_tasks_by_phase", agent="test-runner", phase="terminal") == 4
    assert value(samples, "a2a_bridge_tasks_by_phase", agent="test-runner", phase="processing") == 0
    assert value(samples, "a2a_bridge_session_held") == 1
    assert value(samples, "a2a_bridge_replica_sessions", agent="test-runner", status="dead") == 0


def test_under_require_auth_only_the_operator_reads_metrics(tmp_path: Path) -> None:
    server = secured_server(tmp_path).start()
    try:
        anonymous = httpx.get(f"{server.url}/metrics", timeout=10)
        assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Bearer")
        assert httpx.get(f"{server.url}/metrics", headers=ALICE, timeout=10).status_code == 403
        assert value(scrape(server.url, OPS), "a2a_bridge_session_held") == 1
    finally:
        server.stop()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_without_require_auth_a_caller_off_loopback_needs_the_operator_token() -> None:
    operator = {"ops_metrics_1": Principal("ops", kind="operator")}
    bridge = Bridge(
        sample_agents(), Stores(StoreConfig.parse("memory")), SystemClock(), lambda: str(uuid.uuid4()), principals=operator
    )
    remote = httpx.ASGITransport(bridge.app(), client=("203.0.113.9", 40000))
    async with httpx.AsyncClient(transport=remote, base_url="http://127.0.0.1") as client:
        assert (await client.get("/metrics")).status_code == 401
        scraped = await client.get("/metrics", headers={"Authorization": "Bearer ops_metrics_1"})
        assert scraped.status_code == 200 and "a2a_bridge_session_held" in scraped.text
    local = httpx.ASGITransport(bridge.app(), client=("127.0.0.1", 40000))
    async with httpx.AsyncClient(transport=local, base_url="http://127.0.0.1") as client:
        assert (await client.get("/metrics")).status_code == 200


@pytest.mark.anyio
async def test_on_loopback_a_token_that_is_not_the_operators_is_refused() -> None:
    """A token on loopback is judged as a token: a mistyped operator token is told (401), not let through as if no
    token had been sent."""
    tokens = {"ops_metrics_1": Principal("ops", kind="operator"), "usr_metrics_1": Principal("alice")}
    bridge = Bridge(
        sample_agents(), Stores(StoreConfig.parse("memory")), SystemClock(), lambda: str(uuid.uuid4()), principals=tokens
    )
    local = httpx.ASGITransport(bridge.app(), client=("127.0.0.1", 40000))
    async with httpx.AsyncClient(transport=local, base_url="http://127.0.0.1") as client:
        mistyped = await client.get("/metrics", headers={"Authorization": "Bearer ops_metrics_2"})
        assert mistyped.status_code == 401 and mistyped.headers["www-authenticate"] == 'Bearer realm="metrics"'
        assert (await client.get("/metrics", headers={"Authorization": "Bearer usr_metrics_1"})).status_code == 403
        assert (await client.get("/metrics", headers={"Authorization": "Bearer ops_metrics_1"})).status_code == 200
        assert (await client.get("/metrics")).status_code == 200


def test_each_bridge_has_a_registry_of_its_own() -> None:
    stores = [Stores(StoreConfig.parse("memory")) for _ in range(2)]
    one, two = (Bridge(sample_agents(), s, SystemClock(), lambda: str(uuid.uuid4())) for s in stores)
    one.metrics.requests.labels("test-runner", "GetTask", "ok").inc()
    assert two.metrics.registry is not one.metrics.registry
    assert two.metrics.requests.labels("test-runner", "GetTask", "ok")._value.get() == 0
