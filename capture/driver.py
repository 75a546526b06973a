"""The deterministic capture server and the HTTP client that records what it says.

The bridge runs in this process on 127.0.0.1 (ephemeral ports, one per agent at the root as the kit serves them, plus
a webhook receiver), with seeded ids, a stepping clock and agents whose steps wait on the driver. Requests carry the
kit's Host (`localhost:41241`…), so every URL the server builds reads as the kit's; the receiver's real address is
written as the kit's `http://localhost:41250`. Protobuf maps (a data part's `data`, every `metadata`) come out of
the SDK in no fixed key order, so the transcripts write their keys sorted.
"""

import asyncio
import ipaddress
import json
import random
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import uvicorn
from httpx_sse import EventSource
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import Response as HttpResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from a2a_bridge.agents.base import KitAgent
from a2a_bridge.agents.catalog import sample_agents
from a2a_bridge.app import Bridge
from a2a_bridge.capture.transcript import Headers, Request, Response
from a2a_bridge.capture.writer import Recorded, compact, pretty
from a2a_bridge.core.auth import Principal
from a2a_bridge.core.clock import SteppingClock
from a2a_bridge.core.config import SecurityConfig
from a2a_bridge.store.stores import StoreConfig, Stores

START = datetime(2026, 10, 6, 9, 0, tzinfo=UTC)
SEED = 20261006
KIT_HOSTS = {"test-runner": "localhost:41241", "code-reviewer": "localhost:41242", "deployer": "localhost:41243"}
KIT_WEBHOOKS = "http://localhost:41250"
OPERATOR_TOKEN = "ops_demo_5b9e"
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
"""Where the capture's webhook receiver listens: webhooks to private addresses are refused unless allowed."""
WAIT = 20.0
"""Seconds any step of the driver may wait before the capture fails."""
UNRECORDED_HEADERS = frozenset(
    {"date", "server", "content-length", "transfer-encoding", "connection", "keep-alive", "last-modified"}
)
"""Response headers that say nothing about the exchange (a card's Last-Modified is when its server started)."""
HOOK_HEADERS = ("content-type", "authorization", "x-a2a-notification-token")
"""The webhook request headers a transcript records (the others are the HTTP client's)."""
HEADER_NAMES = {"www-authenticate": "WWW-Authenticate", "etag": "ETag", "x-a2a-notification-token": "X-A2A-Notification-Token"}
"""Header names whose usual spelling is not title case."""


STRUCT_KEYS = frozenset({"data", "metadata"})
"""Keys whose object values are protobuf maps (Struct, map<string, string>), printed in no fixed order."""


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


def canonical(value: Any) -> Any:
    """JSON with the keys of every protobuf map sorted, and everything else in the order the server wrote it."""
    if isinstance(value, dict):
        return {
            key: _sorted(item) if key in STRUCT_KEYS and isinstance(item, dict) else canonical(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


class SeededIds:
    """UUIDs from a seeded generator: the same sequence in every run."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def __call__(self) -> str:
        return str(uuid.UUID(int=self._random.getrandbits(128), version=4))


class Pacer:
    """The agents' pause between steps: passes at once while free; while held, each step waits for the driver."""

    def __init__(self) -> None:
        self.arrivals = 0
        self._held = False
        self._passes = 0
        self._changed = asyncio.Condition()

    async def pause(self, seconds: float) -> None:
        async with self._changed:
            self.arrivals += 1
            self._changed.notify_all()
            await self._changed.wait_for(lambda: not self._held or self._passes > 0)
            if self._held:
                self._passes -= 1

    async def hold(self) -> None:
        async with self._changed:
            self._held, self._passes = True, 0

    async def free(self) -> None:
        async with self._changed:
            self._held = False
            self._changed.notify_all()

    async def step(self, count: int = 1) -> None:
        """Let `count` held steps go, and wait until the agent has come to its next pause."""
        target = self.arrivals + count
        async with self._changed:
            self._passes += count
            self._changed.notify_all()
        await self.reach(target)

    async def reach(self, arrivals: int) -> None:
        """Wait until the agents have paused `arrivals` times in all."""
        async with asyncio.timeout(WAIT):
            async with self._changed:
                await self._changed.wait_for(lambda: self.arrivals >= arrivals)


@dataclass
class Hook:
    """One webhook request the receiver got."""

    path: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class Hooks:
    """The webhook receiver's log."""

    received: list[Hook] = field(default_factory=list)

    def app(self) -> Starlette:
        async def receive(request: HttpRequest) -> HttpResponse:
            headers = [(name, request.headers[name]) for name in HOOK_HEADERS if name in request.headers]
            self.received.append(Hook(request.url.path, headers, await request.body()))
            return HttpResponse(status_code=200)

        return Starlette(routes=[Route("/{path:path}", receive, methods=["POST"])])


def response_head(live: httpx.Response) -> tuple[str, int, str, Headers]:
    """The status line and the headers a transcript records of a live response."""
    kept = tuple(
        (HEADER_NAMES.get(name, name.title()), value) for name, value in live.headers.items() if name not in UNRECORDED_HEADERS
    )
    return "HTTP/1.1", live.status_code, live.reason_phrase, Headers(kept)


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@asynccontextmanager
async def _served(apps: dict[str, tuple[ASGIApp, bool]]) -> AsyncIterator[dict[str, str]]:
    """Serve each app on its own 127.0.0.1 port in this event loop; yields each one's base URL."""
    servers: list[uvicorn.Server] = []
    tasks: list[asyncio.Task[None]] = []
    bases: dict[str, str] = {}
    for name, (app, lifespan) in apps.items():
        sock = _listening()
        config = uvicorn.Config(app, log_level="warning", lifespan="on" if lifespan else "off")
        server = uvicorn.Server(config)
        servers.append(server)
        tasks.append(asyncio.create_task(server.serve(sockets=[sock])))
        bases[name] = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        async with asyncio.timeout(WAIT):
            while not all(server.started for server in servers):
                await asyncio.sleep(0.01)
        yield bases
    finally:
        for server in servers:
            server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass
class Determinism:
    """What makes a capture repeatable: the server's seeded ids, the client's, the stepping clock and the pacer. One
    is shared by the servers of a capture that restarts, so ids and times go on where they stopped."""

    server_ids: SeededIds
    client_ids: SeededIds
    clock: SteppingClock
    pacer: Pacer

    @classmethod
    def seeded(cls, seed: int = SEED) -> "Determinism":
        return cls(SeededIds(seed), SeededIds(seed + 1), SteppingClock(START), Pacer())


class Capture:
    """A deterministic bridge on loopback and a client that records every exchange as a transcript block."""

    def __init__(
        self, bridge: Bridge, determinism: Determinism, hooks: Hooks, bases: dict[str, str], client: httpx.AsyncClient
    ) -> None:
        self.bridge = bridge
        self.determinism = determinism
        self.pacer = determinism.pacer
        self.hooks = hooks
        self.bases = bases
        self.client = client
        self.blocks: list[Recorded] = []
        self.files: dict[str, str] = {}
        """Outputs other than the transcript (`19-planner.log`, `17-signed-card.txt`), by file name."""

    @property
    def webhook_url(self) -> str:
        return self.bases["webhooks"]

    def message_id(self) -> str:
        """A client message id, from the client's own seeded generator."""
        return self.determinism.client_ids()

    @property
    def kit_bases(self) -> dict[str, str]:
        """Each kit host's origin (`http://localhost:41241`) and the live base URL of its agent."""
        return {f"http://{host}": self.bases[agent] for agent, host in KIT_HOSTS.items()}

    def start(self) -> None:
        """Begin a new transcript."""
        self.blocks = []

    def _label(self) -> str:
        return str(1 + sum(1 + len(block.inside) for block in self.blocks if not block.label.startswith("webhook")))

    def _request(self, agent: str, method: str, target: str, headers: list[tuple[str, str]], body: str) -> Request:
        fields = (("Host", KIT_HOSTS[agent]), *headers)
        return Request(method, target, "HTTP/1.1", Headers(tuple(fields)), self.display(body))

    def display(self, text: str) -> str:
        """Text as the transcript shows it: the receiver's real address is the kit's webhook address."""
        return text.replace(self.webhook_url, KIT_WEBHOOKS)

    async def send(
        self,
        agent: str,
        title: str,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: Any = None,
        raw: str | None = None,
        record: bool = True,
    ) -> tuple[Recorded, Any]:
        """Send one request (a JSON body, pretty-printed as the kit does, or a raw one) and record the whole reply."""
        text = raw if raw is not None else (pretty(body) if body is not None else "")
        live = await self.client.request(
            method, self.bases[agent] + target, headers=[("Host", KIT_HOSTS[agent]), *headers],
            content=text.encode() if text else None,
        )
        version, status, reason, kept = response_head(live)
        try:
            parsed: Any = live.json()
            shown = self.display(pretty(canonical(parsed)))
        except ValueError:
            parsed, shown = None, self.display(live.text)
        block = Recorded(self._label(), title, self._request(agent, method, target, headers, text),
                         Response(version, status, reason, kept, shown))
        if record:
            self.blocks.append(block)
        return block, parsed

    @asynccontextmanager
    async def stream(
        self, agent: str, title: str, target: str, headers: list[tuple[str, str]], body: Any = None, method: str = "POST"
    ) -> AsyncIterator["Stream"]:
        """Open a streaming request; events are read (and recorded) through the yielded Stream."""
        text = pretty(body) if body is not None else ""
        async with self.client.stream(
            method, self.bases[agent] + target, headers=[("Host", KIT_HOSTS[agent]), *headers],
            content=text.encode() if text else None,
        ) as live:
            version, status, reason, kept = response_head(live)
            block = Recorded(self._label(), title, self._request(agent, method, target, headers, text),
                             Response(version, status, reason, kept))
            self.blocks.append(block)
            yield Stream(self, block, live)

    async def settle(self) -> None:
        """Wait until no turn runs in any agent (call only while no agent is held at a pause)."""
        async with asyncio.timeout(WAIT):
            for agent in self.bridge.agents.values():
                await agent.host.wait_idle()
                if agent.host.push is not None:
                    await agent.host.push.drain()

    def webhooks(self, since: int) -> None:
        """Record the webhook requests received from index `since` on as `webhook N` blocks."""
        for number, hook in enumerate(self.hooks.received[since:], 1):
            body = self.display(pretty(canonical(json.loads(hook.body))))
            headers = Headers(tuple((HEADER_NAMES.get(name, name.title()), value) for name, value in hook.headers))
            request = Request("POST", hook.path, "HTTP/1.1", headers, body)
            self.blocks.append(Recorded(f"webhook {number}", "received by the client", request))


class Stream:
    """The events of one open stream, recorded as they are read."""

    def __init__(self, capture: Capture, block: Recorded, live: httpx.Response) -> None:
        self.capture = capture
        self.block = block
        self._events = EventSource(live).aiter_sse()
        self.frames: list[str] = []

    async def take(self, count: int) -> list[Any]:
        """Read exactly `count` more events."""
        events = []
        async with asyncio.timeout(WAIT):
            for _ in range(count):
                event = await self._next()
                if event is None:
                    raise AssertionError(f"block {self.block.label}: the stream ended after {len(self.frames)} events")
                events.append(event)
        return events

    async def rest(self) -> list[Any]:
        """Every event until the server closes the stream."""
        events = []
        async with asyncio.timeout(WAIT):
            while (event := await self._next()) is not None:
                events.append(event)
        return events

    async def _next(self) -> Any | None:
        async for sse in self._events:
            if sse.data:
                break
        else:
            return None
        event = sse.json()
        self.frames.append(self.capture.display(compact(canonical(event))))
        assert self.block.response is not None
        response = self.block.response
        self.block.response = Response(response.version, response.status, response.reason, response.headers, frames=tuple(self.frames))
        return event

    async def inside(self, send: Any) -> Any:
        """Send a request while this stream stays open; it is written inside the stream, after the events so far."""
        before = len(self.capture.blocks)
        result = await send
        block = self.capture.blocks.pop()
        assert len(self.capture.blocks) == before
        self.block.inside.append((len(self.frames), block))
        return result


@asynccontextmanager
async def capture_server(store: StoreConfig = StoreConfig(None), determinism: Determinism | None = None) -> AsyncIterator[Capture]:
    """The bridge with seeded ids, a stepping clock from 2026-10-06T09:00:00Z and paced agents, on loopback; in memory
    unless `store` names a database, which a second server given the same `determinism` starts again from."""
    world = determinism or Determinism.seeded()
    specs = sample_agents(pace=1.0, new_id=world.server_ids)
    for spec in specs:
        if isinstance(spec.executor, KitAgent):
            spec.executor.pause = world.pacer.pause
    bridge = Bridge(
        specs, Stores(store), world.clock, world.server_ids,
        principals={OPERATOR_TOKEN: Principal("operator", kind="operator")},
        security=SecurityConfig(webhook_networks=(LOOPBACK,)),
    )
    hooks = Hooks()
    apps: dict[str, tuple[ASGIApp, bool]] = {"bridge": (bridge.app(), True), "webhooks": (hooks.app(), False)}
    apps.update({name: (bridge.kit_app(name, f"http://{host}"), False) for name, host in KIT_HOSTS.items()})
    async with _served(apps) as bases, httpx.AsyncClient(timeout=WAIT) as client:
        yield Capture(bridge, world, hooks, bases, client)
