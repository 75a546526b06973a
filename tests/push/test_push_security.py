"""Webhooks: what a delivery carries (authentication, token, media type, body, order), which URLs are refused at
creation and again at delivery, and that a connection goes only to the address that was checked. Traffic goes only to
receivers on 127.0.0.1: a delivery to any other address is carried to one by a fake network (`network`), which
records where the bridge connected."""

import asyncio
import contextlib
import json
import socket
import ssl
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from a2a_bridge.agents.catalog import sample_agents
from a2a_bridge.app import Bridge
from a2a_bridge.capture.replay import WebhookReceiver
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.core.config import SecurityConfig, parse_network
from a2a_bridge.push.webhook_connection import Connection, WireError, open_connection
from a2a_bridge.push.webhook_wire import WebhookConnections
from a2a_bridge.push.webhooks import WebhookPolicy
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.support import A2A, LOOPBACK_WEBHOOKS, ServerProcess, rpc, wait_for

PUBLIC = "93.184.215.14"
"""A public address the fake resolver gives; the fake network answers for it, so nothing is sent there."""
HOOK = "https://hooks.example.com/a2a-events"
AUTH = {"scheme": "Bearer", "credentials": "hook_secret_91d2"}
TOKEN = "planner-run-0006"
RUN = "Run the unit tests for payments-api at commit 9f3c2e1"
REFUSED = [
    "http://127.0.0.1:9/h",
    "http://127.1.2.3/h",
    "http://10.1.2.3/h",
    "http://172.16.0.5/h",
    "http://172.31.255.1/h",
    "http://192.168.1.10/h",
    "http://169.254.169.254/latest/meta-data",
    "http://100.64.0.1/h",
    "http://0.0.0.0/h",
    "http://224.0.0.1/h",
    "http://[::1]/h",
    "http://[fc00::1]/h",
    "http://[fd12:3456::1]/h",
    "http://[fe80::1]/h",
    "http://[::ffff:127.0.0.1]/h",
    "http://[::ffff:10.0.0.1]/h",
    "http://localhost/h",
    "http://internal.example.test/h",
    "http://metadata.example.test/h",
    "http://ula.example.test/h",
    "http://mixed.example.test/h",
    "http://unresolvable.example.test/h",
    "https://user:pw@hooks.example.com/h",
    "ftp://hooks.example.com/h",
    "file:///etc/passwd",
    "not a url",
]
"""Loopback, private, link-local, shared, unspecified, multicast and unique-local addresses, as literals and as host
names that resolve to them (or to one of them among public ones), plus URLs that are not http(s) to a host."""
FAKE_DNS = {
    "hooks.example.com": [PUBLIC],
    "localhost": ["127.0.0.1", "::1"],
    "internal.example.test": ["10.0.0.7"],
    "metadata.example.test": ["169.254.169.254"],
    "ula.example.test": ["fd00::7"],
    "mixed.example.test": [PUBLIC, "192.168.0.3"],
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[str]]]:
    """The bridge's resolver, answered from a table the test may change; unknown names do not resolve."""
    table = {name: list(addresses) for name, addresses in FAKE_DNS.items()}

    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "unknown host")
        return list(table[host])

    monkeypatch.setattr("a2a_bridge.push.webhooks.system_resolver", resolve)
    yield table


class FakeNetwork:
    """Where the bridge's webhook connections were opened (address, port, TLS server name), each carried to a loopback
    receiver instead, in plain HTTP: nothing leaves 127.0.0.1."""

    def __init__(self, receiver: WebhookReceiver) -> None:
        self.receiver = receiver
        self.connects: list[tuple[str, int, str | None]] = []

    async def open(self, address: str, port: int, context: ssl.SSLContext | None, server_hostname: str | None) -> Connection:
        self.connects.append((address, port, server_hostname))
        return await open_connection("127.0.0.1", int(self.receiver.base.rsplit(":", 1)[1]), None, None)


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNetwork]:
    with WebhookReceiver() as receiver:
        fake = FakeNetwork(receiver)
        monkeypatch.setattr("a2a_bridge.push.webhook_wire.open_connection", fake.open)
        yield fake


@contextlib.asynccontextmanager
async def in_process(*networks: str) -> AsyncIterator[tuple[Bridge, httpx.AsyncClient]]:
    """The three sample agents in this process, in memory, reached through httpx's ASGI transport."""
    security = SecurityConfig(webhook_networks=tuple(parse_network(n, "test") for n in networks))
    stores = Stores(StoreConfig(None))
    bridge = Bridge(sample_agents(pace=0.01), stores, SystemClock(), lambda: str(uuid.uuid4()), security=security)
    app = bridge.app()
    async with bridge.lifespan(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bridge.test", headers=A2A, timeout=30) as client:
            yield bridge, client


async def call(client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = await client.post("/test-runner/a2a/jsonrpc", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def streamed(client: httpx.AsyncClient, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The results of a SendStreamingMessage, in order."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params}
    response = await client.post("/test-runner/a2a/jsonrpc", json=body)
    return [json.loads(line[5:])["result"] for line in response.text.splitlines() if line.startswith("data:")]


def run_with_hook(url: str, **config: Any) -> dict[str, Any]:
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": RUN}]}
    return {"message": message, "configuration": {"taskPushNotificationConfig": {"url": url, **config}}}


def field_of(reply: dict[str, Any]) -> list[str]:
    details = reply["error"]["data"]
    return [v["field"] for d in details if d.get("@type", "").endswith("BadRequest") for v in d["fieldViolations"]]


async def drained(bridge: Bridge) -> None:
    push = bridge.agents["test-runner"].host.push
    assert push is not None
    await push.drain()


@pytest.mark.anyio
async def test_a_webhook_carries_authentication_token_media_type_and_each_event_in_order(
    dns: dict[str, list[str]], network: FakeNetwork
) -> None:
    async with in_process() as (bridge, client):
        frames = await streamed(client, run_with_hook(HOOK, token=TOKEN, authentication=AUTH))
        await drained(bridge)
    events = [frame for frame in frames if "task" not in frame]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert any("artifactUpdate" in event for event in events)
    received = network.receiver.received()
    assert [json.loads(sent.body) for sent in received] == events
    for sent in received:
        assert sent.method == "POST" and sent.path == "/a2a-events"
        assert sent.headers.get("host") == "hooks.example.com"
        assert sent.headers.get("content-type") == "application/a2a+json"
        assert sent.headers.get("authorization") == "Bearer hook_secret_91d2"
        assert sent.headers.get("x-a2a-notification-token") == TOKEN
        assert sent.headers.get("accept-encoding") == "identity"
    assert set(network.connects) == {(PUBLIC, 443, "hooks.example.com")}


@pytest.mark.anyio
async def test_a_config_without_authentication_sends_neither_header(
    dns: dict[str, list[str]], network: FakeNetwork
) -> None:
    async with in_process() as (bridge, client):
        await streamed(client, run_with_hook(HOOK))
        await drained(bridge)
    received = network.receiver.received()
    assert received
    for sent in received:
        assert "authorization" not in sent.headers and "x-a2a-notification-token" not in sent.headers


@pytest.mark.anyio
async def test_refused_webhook_urls_are_refused_at_creation_and_nothing_is_sent(
    dns: dict[str, list[str]], network: FakeNetwork
) -> None:
    async with in_process() as (bridge, client):
        done = (await call(client, "SendMessage", {"message": run_with_hook(HOOK)["message"]}))["result"]["task"]
        for url in REFUSED:
            created = await call(client, "CreateTaskPushNotificationConfig", {"taskId": done["id"], "url": url})
            assert created["error"]["code"] == -32602 and field_of(created) == ["url"], url
            rest = await client.post(f"/test-runner/a2a/rest/tasks/{done['id']}/pushNotificationConfigs", json={"url": url})
            assert rest.status_code == 400, url
            sent = await call(client, "SendMessage", run_with_hook(url))
            assert field_of(sent) == ["configuration.taskPushNotificationConfig.url"], url
        listed = await call(client, "ListTasks", {})
        configs = await call(client, "ListTaskPushNotificationConfigs", {"taskId": done["id"]})
        await drained(bridge)
    assert [task["id"] for task in listed["result"]["tasks"]] == [done["id"]]
    assert configs["result"].get("configs", []) == []
    assert not network.connects


@pytest.mark.anyio
async def test_a_webhook_whose_host_now_resolves_to_a_private_address_is_not_delivered(
    monkeypatch: pytest.MonkeyPatch, network: FakeNetwork
) -> None:
    """The URL is checked again at each delivery: DNS answers change (rebinding). The host resolves to a public
    address once, when the config is created, and to a private one from then on."""
    lookups: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        lookups.append(host)
        return [PUBLIC] if len(lookups) == 1 else ["10.0.0.9"]

    monkeypatch.setattr("a2a_bridge.push.webhooks.system_resolver", rebinding)
    async with in_process() as (bridge, client):
        frames = await streamed(client, run_with_hook(HOOK))
        await drained(bridge)
    assert frames[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(lookups) > 1
    assert not network.connects


class Recorder:
    """A way of opening connections that records where it was asked to connect and connects nowhere."""

    def __init__(self) -> None:
        self.connects: list[tuple[str, int, str | None]] = []

    async def open(self, address: str, port: int, context: ssl.SSLContext | None, server_hostname: str | None) -> Connection:
        self.connects.append((address, port, server_hostname))
        raise ConnectionRefusedError("recorded")


@pytest.mark.anyio
async def test_a_connection_goes_only_to_the_address_that_was_checked(dns: dict[str, list[str]]) -> None:
    recorder = Recorder()
    connections = WebhookConnections(WebhookPolicy(), opener=recorder.open)
    with pytest.raises(WireError, match="ConnectError"):
        await connections.post("https://hooks.example.com/h", {}, b"{}")
    assert recorder.connects == [(PUBLIC, 443, "hooks.example.com")]
    for host in ("mixed.example.test", "internal.example.test", "10.0.0.1", "[::1]", "unresolvable.example.test"):
        with pytest.raises(WireError, match="ConnectError"):
            await connections.post(f"http://{host}/h", {}, b"{}")
    assert recorder.connects == [(PUBLIC, 443, "hooks.example.com")]


@pytest.mark.anyio
async def test_an_allowed_host_name_is_delivered_to_the_address_it_was_checked_at(dns: dict[str, list[str]]) -> None:
    """`hooks.test` resolves only in the fake resolver: the receiver on 127.0.0.1 is reached through the address
    the policy checked, with the URL's host in the Host header."""
    with WebhookReceiver() as receiver:
        port = receiver.base.rsplit(":", 1)[1]
        dns["hooks.test"] = ["127.0.0.1"]
        async with in_process("127.0.0.1/32") as (bridge, client):
            await streamed(client, run_with_hook(f"http://hooks.test:{port}/a2a-events", token=TOKEN))
            await drained(bridge)
        deliveries = receiver.received()
    assert deliveries and all(d.headers.get("Host") == f"hooks.test:{port}" for d in deliveries)
    assert json.loads(deliveries[-1].body)["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"authentication": {"scheme": "Bearer"}}, "authentication.credentials"),
        ({"authentication": {"credentials": "secret"}}, "authentication.scheme"),
        ({"authentication": {"scheme": "Bearer realm", "credentials": "secret"}}, "authentication.scheme"),
        ({"authentication": {"scheme": "Bearer", "credentials": "a\r\nX-Injected: 1"}}, "authentication.credentials"),
        ({"token": "run\n7"}, "token"),
    ],
)
async def test_authentication_and_token_that_would_not_be_sent_are_refused(
    dns: dict[str, list[str]], config: dict[str, Any], field: str
) -> None:
    async with in_process() as (_, client):
        done = (await call(client, "SendMessage", {"message": run_with_hook(HOOK)["message"]}))["result"]["task"]
        created = await call(client, "CreateTaskPushNotificationConfig", {"taskId": done["id"], "url": HOOK, **config})
    assert field_of(created) == [field]


def deliveries_until_completed(receiver: WebhookReceiver) -> list[dict[str, Any]]:
    def completed() -> list[dict[str, Any]] | None:
        bodies = [json.loads(d.body) for d in receiver.received()]
        ended = bodies and bodies[-1].get("statusUpdate", {}).get("status", {}).get("state") == "TASK_STATE_COMPLETED"
        return bodies if ended else None

    return wait_for(completed, timeout=30, what="the webhooks up to TASK_STATE_COMPLETED")


def test_a_loopback_receiver_gets_each_event_with_authentication_when_configuration_allows_loopback(tmp_path: Any) -> None:
    server = ServerProcess("memory", pace=0.05, extra=LOOPBACK_WEBHOOKS).start()
    try:
        with WebhookReceiver() as receiver:
            runner = server.agent("test-runner")
            reply = rpc(runner, "SendMessage", run_with_hook(f"{receiver.base}/a2a-events", token=TOKEN, authentication=AUTH))
            task = reply["result"]["task"]
            bodies = deliveries_until_completed(receiver)
            deliveries = receiver.received()
    finally:
        server.stop()
    assert all(d.path == "/a2a-events" for d in deliveries)
    for delivery in deliveries:
        assert delivery.headers.get("Content-Type") == "application/a2a+json"
        assert delivery.headers.get("Authorization") == "Bearer hook_secret_91d2"
        assert delivery.headers.get("X-A2A-Notification-Token") == TOKEN
    states = [b["statusUpdate"]["status"]["state"] for b in bodies if "statusUpdate" in b]
    assert states[0] == "TASK_STATE_WORKING" and states[-1] == "TASK_STATE_COMPLETED"
    assert states.count("TASK_STATE_COMPLETED") == 1
    assert {b.get("statusUpdate", b.get("artifactUpdate"))["taskId"] for b in bodies} == {task["id"]}
    chunks = [b["artifactUpdate"] for b in bodies if "artifactUpdate" in b]
    assert [c["artifact"]["artifactId"] for c in chunks][-1] == "summary"


def test_without_the_allowance_a_loopback_receiver_is_refused_and_gets_nothing() -> None:
    server = ServerProcess("memory", pace=0.05).start()
    try:
        with WebhookReceiver() as receiver:
            runner = server.agent("test-runner")
            refused = rpc(runner, "SendMessage", run_with_hook(f"{receiver.base}/a2a-events"))
            assert refused["error"]["code"] == -32602
            assert field_of(refused) == ["configuration.taskPushNotificationConfig.url"]
            message = run_with_hook(HOOK)["message"]
            done = rpc(runner, "SendMessage", {"message": message})["result"]["task"]
            created = rpc(runner, "CreateTaskPushNotificationConfig", {"taskId": done["id"], "url": f"{receiver.base}/h"})
            assert created["error"]["code"] == -32602 and field_of(created) == ["url"]
            listed = rpc(runner, "ListTasks", {})["result"]["tasks"]
            assert [t["id"] for t in listed] == [done["id"]]
            assert receiver.received() == []
    finally:
        server.stop()


@pytest.mark.anyio
async def test_a_push_config_for_a_task_the_caller_cannot_see_resolves_no_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """The task and its owner are checked before the webhook's host is looked up: a caller naming a task it may not
    see (or none) cannot make the server resolve names of its choosing."""
    looked_up: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        looked_up.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "unknown host")

    monkeypatch.setattr("a2a_bridge.push.webhooks.system_resolver", resolve)
    async with in_process() as (_, client):
        url = "https://attacker-chosen.example/hook"
        created = await call(client, "CreateTaskPushNotificationConfig", {"taskId": str(uuid.uuid4()), "url": url})
        assert created["error"]["code"] == -32001, created
        follow_up = {**run_with_hook(url), "message": {**run_with_hook(url)["message"], "taskId": str(uuid.uuid4())}}
        sent = await call(client, "SendMessage", follow_up)
        assert sent["error"]["code"] == -32001, sent
    assert looked_up == [], looked_up


EMBEDDED_REFUSED = [
    "http://[2002:7f00:1::]/h",
    "http://[2002:a9fe:a9fe::]/h",
    "http://[2002:c0a8:103::1]/h",
    "http://[64:ff9b::7f00:1]/h",
    "http://[64:ff9b::a9fe:a9fe]/h",
    "http://[64:ff9b:1::5db8:d70e]/h",
    "http://[2001:0:7f00:1::]/h",
    "http://[2001:0:5db8:d70e:8000:63bf:80ff:fffe]/h",
    "http://[::127.0.0.1]/h",
    "http://[2606:4700::5efe:a9fe:a9fe]/h",
    "http://sixtofour.example.test/h",
    "http://nat64.example.test/h",
    "http://teredo.example.test/h",
]
"""IPv6 addresses that carry a loopback, link-local or private IPv4 address: 6to4 (2002::/16), NAT64 (64:ff9b::/96;
64:ff9b:1::/48 is refused whatever it carries), Teredo (2001::/32: a loopback server, or a client that is 127.0.0.1
once de-obfuscated), IPv4-compatible and ISATAP, as literals and as host names that resolve to them."""
EMBEDDED_DNS = {
    "sixtofour.example.test": ["2002:7f00:1::"],
    "nat64.example.test": ["64:ff9b::a9fe:a9fe"],
    "teredo.example.test": ["2001:0:5db8:d70e:8000:63bf:80ff:fffe"],
}
EMBEDDED_PUBLIC = ["2002:5db8:d70e::1", "64:ff9b::5db8:d70e", "2001:0:5db8:d70e:8000:63bf:a247:28f1"]
"""The same forms carrying public addresses (93.184.215.14; Teredo's client 93.184.215.14 once de-obfuscated)."""


@pytest.mark.anyio
async def test_ipv6_forms_that_carry_a_non_public_ipv4_address_are_refused_at_creation_and_at_connection(
    dns: dict[str, list[str]], network: FakeNetwork
) -> None:
    dns.update(EMBEDDED_DNS)
    async with in_process("127.0.0.1/32") as (bridge, client):
        done = (await call(client, "SendMessage", {"message": run_with_hook(HOOK)["message"]}))["result"]["task"]
        for url in EMBEDDED_REFUSED:
            created = await call(client, "CreateTaskPushNotificationConfig", {"taskId": done["id"], "url": url})
            assert created["error"]["code"] == -32602 and field_of(created) == ["url"], url
            rest = await client.post(f"/test-runner/a2a/rest/tasks/{done['id']}/pushNotificationConfigs", json={"url": url})
            assert rest.status_code == 400, url
        configs = await call(client, "ListTaskPushNotificationConfigs", {"taskId": done["id"]})
        await drained(bridge)
    assert configs["result"].get("configs", []) == []
    assert not network.connects
    recorder = Recorder()
    connections = WebhookConnections(WebhookPolicy(), opener=recorder.open)
    for url in EMBEDDED_REFUSED:
        with pytest.raises(WireError, match="ConnectError"):
            await connections.post(url, {}, b"{}")
    assert recorder.connects == []


@pytest.mark.anyio
async def test_ipv6_forms_that_carry_a_public_ipv4_address_are_accepted(
    dns: dict[str, list[str]], network: FakeNetwork
) -> None:
    async with in_process() as (bridge, client):
        done = (await call(client, "SendMessage", {"message": run_with_hook(HOOK)["message"]}))["result"]["task"]
        for address in EMBEDDED_PUBLIC:
            created = await call(client, "CreateTaskPushNotificationConfig", {"taskId": done["id"], "url": f"http://[{address}]/h"})
            assert "result" in created, (address, created)
        await drained(bridge)
