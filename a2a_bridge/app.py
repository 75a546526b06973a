"""Assembles the Starlette application: each agent's card, its A2A bindings (and its gRPC server) and its operator
endpoints."""

import asyncio
import contextlib
import urllib.parse
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import NamedTuple

from a2a.server.request_handlers import RequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_rest_routes
from a2a.types import AgentCard, AgentInterface
from a2a.utils.signing import create_agent_card_signer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Scope

from a2a_bridge.agent import Agent
from a2a_bridge.core.auth import (
    BearerGate,
    BridgeContextBuilder,
    Principal,
    bearer_token,
    is_operator,
    own_base,
    public_base,
)
from a2a_bridge.core.clock import Clock, StoreClock, SystemClock
from a2a_bridge.core.config import DEMO_OPERATOR_TOKEN, SecurityConfig
from a2a_bridge.http.agent_mounts import AgentMounts
from a2a_bridge.http.binding_paths import TrailingSlash
from a2a_bridge.http.bridge_routes import STORE_ERRORS, BridgeEndpoints, StatusPolls, problem
from a2a_bridge.http.card_caching import card_response
from a2a_bridge.http.direct_rpc import DirectRpc
from a2a_bridge.http.extensions import RequiredExtensionsContextBuilder, required_extensions
from a2a_bridge.http.front_door import DirectAgent, FrontDoor
from a2a_bridge.http.grpc_binding import BridgeGrpcContextBuilder, GrpcAgent, GrpcServers
from a2a_bridge.http.handler import BridgeRequestHandler
from a2a_bridge.http.jsonrpc import BridgeJsonRpcDispatcher, jsonrpc_routes
from a2a_bridge.http.limits import RequestLimits, StreamSlots
from a2a_bridge.http.media_type import BindingMediaTypes
from a2a_bridge.http.request_guard import RequestGuard
from a2a_bridge.http.rest_errors import RestErrorText
from a2a_bridge.http.shutdown import Draining
from a2a_bridge.http.webhook_routes import WebhookEndpoints
from a2a_bridge.ops.console_app import Console
from a2a_bridge.ops.console_overview import Surroundings
from a2a_bridge.ops.metrics import MeteredExecutor, MeteredHandler, Metrics, Scrape, metrics_endpoint
from a2a_bridge.push.outbox import Outbox
from a2a_bridge.push.webhook_wire import WebhookConnections, WebhookPoster
from a2a_bridge.push.webhooks import WebhookPolicy
from a2a_bridge.store.stored_bytes import StoredBytes
from a2a_bridge.store.stores import Stores
from a2a_bridge.tasks.host_env import HostSettings
from a2a_bridge.tasks.sessions import SessionKeeper
from a2a_bridge.tasks.task_host import TaskHost

CARD_PATH = "/.well-known/agent-card.json"
JSONRPC_PATH = "/a2a/jsonrpc"
REST_PATH = "/a2a/rest"
TASKS_PATH = "/tasks/"
APPROVE_PATH = "/approve/"


AgentSpec = Agent
"""The name the bridge's own modules and tests use for `Agent`."""


@dataclass
class Interfaces:
    """An agent's interfaces as a caller at `base` reaches them: both JSON bindings, and gRPC once its port is bound
    (at the host name the caller used)."""

    grpc_port: int | None = None

    def __call__(self, base: str) -> list[AgentInterface]:
        found = [
            AgentInterface(url=f"{base}{JSONRPC_PATH}", protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=f"{base}{REST_PATH}", protocol_binding="HTTP+JSON", protocol_version="1.0"),
        ]
        if self.grpc_port is not None:
            host = urllib.parse.urlsplit(base).hostname or "127.0.0.1"
            address = f"[{host}]" if ":" in host else host
            found.append(
                AgentInterface(url=f"{address}:{self.grpc_port}", protocol_binding="GRPC", protocol_version="1.0")
            )
        return found


@dataclass
class GrpcSettings:
    """`serve --grpc-port`: every agent also on gRPC, at `host`, from `first_port` on (0: a free port each); `http`
    is the HTTP base URL the agents' links point to from a gRPC call."""

    host: str
    first_port: int
    http: str


@dataclass
class ServedAgent:
    """An agent wired to its store and handler; shared by every address it is served at."""

    spec: AgentSpec
    host: TaskHost
    handler: RequestHandler
    """The agent's `BridgeRequestHandler`, metered (`metrics.MeteredHandler`): what every binding calls."""
    tokens: dict[str, Principal] = field(default_factory=dict)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    slots: StreamSlots = field(default_factory=lambda: StreamSlots(SecurityConfig().limits.max_streams))
    """What each principal holds and does (streams, long polls, tasks a minute, stored bytes), shared with the
    bridge's other agents."""
    direct_rpc: bool = True
    """Whether `SendMessage` and `GetTask` over JSON-RPC take the direct path (`a2a_bridge.http.direct_rpc`)."""
    started: Callable[[], datetime | None] = lambda: None
    """When the bridge started serving (None before), the cards' Last-Modified."""
    interfaces: Interfaces = field(default_factory=Interfaces)

    def card_for(self, base: str) -> AgentCard:
        """The public card with interface URLs that work from the caller's side, signed when a key is set."""
        card = AgentCard()
        card.CopyFrom(self.spec.card)
        card.supported_interfaces.extend(self.interfaces(base))
        if self.spec.signing_key:
            sign = create_agent_card_signer(
                self.spec.signing_key, {"alg": "HS256", "typ": "JOSE", "kid": f"{self.spec.name}-key-1"}  # type: ignore[typeddict-item]
            )
            card = sign(card)
        return card

    def routes(self, builder: BridgeContextBuilder, dispatcher: BridgeJsonRpcDispatcher) -> list[BaseRoute]:
        """Card, JSON-RPC, HTTP+JSON and operator routes, relative to where the agent is mounted."""

        async def card(request: Request) -> Response:
            return await self.card_endpoint(request, builder.base_path, builder.public_url)

        open_approvals = not self.security.require_auth
        demo_owners = frozenset({"", *(p.name for p in (self.spec.tokens or {}).values())})
        endpoints = BridgeEndpoints(
            self.host, builder.identity, is_operator, open_approvals, builder.base_url, demo_owners
        )
        routes: list[BaseRoute] = [Route(CARD_PATH, card, methods=["GET"])]
        # Before the REST routes: their catch-all /{tenant} mount would otherwise take these paths and answer 404.
        routes += endpoints.routes(self.spec.approvals, self.spec.actions)
        routes += WebhookEndpoints(self.host, builder.identity, is_operator).routes()
        routes += jsonrpc_routes(dispatcher, JSONRPC_PATH)
        routes += create_rest_routes(self.handler, context_builder=builder, path_prefix=REST_PATH)
        return routes

    async def card_endpoint(self, request: Request, base_path: str, public_url: str | None) -> Response:
        """The card answered, with its caching headers, for the agent served at `base_path`."""
        body = JSONResponse(agent_card_to_dict(self.card_for(self.card_base(request, base_path, public_url)))).body
        return card_response(request, body, self.spec.card.SerializeToString(deterministic=True), self.started())

    def card_base(self, request: Request, base_path: str, public_url: str | None) -> str:
        """The base URL a card names: the public URL when configured; else, for a signed card, the address the server
        listens on (a caller's Host is never signed); else the address the caller used."""
        if public_url:
            return f"{public_url}{base_path}"
        if self.spec.signing_key:
            return own_base(request.scope, base_path)
        return public_base(request, base_path, request.headers.get("host"))

    def principal_name(self, scope: Scope) -> str:
        """The principal a request's bearer token names ('' for the anonymous principal)."""
        token = bearer_token(scope)
        principal = self.tokens.get(token) if token else None
        return principal.name if principal is not None else ""

    def asgi(self, base_path: str, public_url: str | None = None) -> ASGIApp:
        """The agent's routes behind the request limits, and behind the bearer gate when the agent requires a token
        (every agent under require_auth, the approval link too); the direct path for the hot JSON-RPC methods right
        behind the limits, and the unchanged Task Status poll (304) in front of them. `public_url` is the address of
        the server (or of this agent's own port) that cards and links name."""
        return self.layers(base_path, public_url).app

    def layers(self, base_path: str, public_url: str | None = None) -> "AgentLayers":
        """`asgi`'s app, with the layers of it that `FrontDoor` does inline."""
        builder = RequiredExtensionsContextBuilder(self.tokens, base_path, required_extensions(self.spec.card), public_url)
        dispatcher = BridgeJsonRpcDispatcher(self.handler, context_builder=builder)
        app: ASGIApp = RestErrorText(Starlette(routes=self.routes(builder, dispatcher), exception_handlers=STORE_ERRORS), REST_PATH)
        direct = None
        if self.direct_rpc:
            app = direct = DirectRpc(app, self.handler, builder, dispatcher, JSONRPC_PATH, self.host.finished.json)
        app = limits = RequestLimits(app, self.security.limits, self.slots, self.principal_name, JSONRPC_PATH)
        app = BindingMediaTypes(app, JSONRPC_PATH, REST_PATH)
        app = StatusPolls(app, self.host, self.principal_name)
        gate = None
        if self.security.require_auth:
            protected = (JSONRPC_PATH, REST_PATH, TASKS_PATH, APPROVE_PATH)
            app = BearerGate(app, self.spec.name, self.tokens, protected=protected)
            gate = self.tokens
        elif self.spec.tokens is not None:
            app = BearerGate(app, self.spec.name, self.tokens, protected=(JSONRPC_PATH, REST_PATH, TASKS_PATH))
            gate = self.tokens
        return AgentLayers(TrailingSlash(app, (JSONRPC_PATH, REST_PATH)), direct, limits, gate)


class AgentLayers(NamedTuple):
    """An agent's app, and its layers `FrontDoor` does inline: the direct path (None when off), the request limits
    and the tokens of its bearer gate (None without one)."""

    app: ASGIApp
    direct: DirectRpc | None
    limits: RequestLimits
    gate: dict[str, Principal] | None


class Bridge:
    """Every served agent, the stores behind them and the webhook client they share."""

    def __init__(
        self,
        specs: list[AgentSpec],
        stores: Stores,
        clock: Clock,
        new_id: Callable[[], str],
        settings: HostSettings | None = None,
        principals: dict[str, Principal] | None = None,
        security: SecurityConfig | None = None,
        direct_rpc: bool = True,
        grpc: GrpcSettings | None = None,
    ) -> None:
        """`principals` add to those of `security`; under `security.require_auth` the agents' demo tokens are not
        accepted. `direct_rpc=False` leaves every JSON-RPC request to the SDK's dispatcher; `grpc` serves every agent
        on gRPC too."""
        self.grpc = grpc
        self.grpc_servers: GrpcServers | None = None
        self.stores = stores
        self.started = False
        """True from the end of start-up (recovery done) to the start of shutdown: what /readyz reports."""
        self.metrics = Metrics()
        self.ledger = stores.ledger(self.metrics.store_write)
        if self.ledger.shared:
            clock = StoreClock(clock)
        self.clock = clock
        """The clock of every host: on a shared database the database's (`StoreClock`), which replicas read leases on."""
        self.security = security or SecurityConfig()
        self.principals = {**self.security.principals, **(principals or {})}
        self.slots = StreamSlots(self.security.limits.max_streams, StoredBytes(self.ledger))
        self.started_at: datetime | None = None
        """When start-up began, the cards' Last-Modified (None before)."""
        configured = WebhookPolicy(self.security.webhook_networks)
        policies = {spec.name: spec.webhook_policy or configured for spec in specs}
        self.webhooks = {policy: WebhookConnections(policy) for policy in dict.fromkeys([configured, *policies.values()])}
        """One webhook connection pool per webhook policy (the agents share the configuration's unless they have their own)."""
        self.agents: dict[str, ServedAgent] = {}
        base = settings or HostSettings()
        # The outbox schedules its attempts on real time (the database's where shared), never on a fake clock that
        # each reading moves (a capture's): its reads come at times no driver orders.
        outbox_clock = clock if self.ledger.shared else SystemClock()
        for spec in specs:
            policy = policies[spec.name]
            task_store, push_store = stores.for_agent(spec.name)
            push_enabled = spec.card.capabilities.push_notifications
            webhook_outcome = self.metrics.webhook(spec.name)
            push = Outbox(
                spec.name, self.ledger, push_store, WebhookPoster(self.webhooks[policy]), policy, outbox_clock,
                base.webhook_retries, webhook_outcome,
            ) if push_enabled else None
            host = TaskHost(
                spec.name,
                MeteredExecutor(spec.executor, spec.name, self.metrics),
                task_store,
                self.ledger,
                push_store if push_enabled else None,
                push,
                clock,
                new_id,
                replace(
                    base,
                    repeat_safe=spec.safe_to_repeat,
                    max_task_bytes=self.security.limits.max_task_bytes,
                ),
            )
            agent_interfaces = Interfaces()
            handler = BridgeRequestHandler(
                spec.card, host, spec.extended_card, agent_interfaces, spec.retries, self.security.limits, policy
            )
            demo_tokens = {} if self.security.require_auth else spec.tokens or {}
            tokens = {**self.principals, **demo_tokens}
            self.agents[spec.name] = ServedAgent(
                spec, host, MeteredHandler(handler, spec.name, self.metrics), tokens, self.security, self.slots, direct_rpc, lambda: self.started_at,
                agent_interfaces,
            )
        self.sessions = SessionKeeper(self.ledger, [agent.host for agent in self.agents.values()], clock)
        self.direct_agents: dict[str, DirectAgent] = {}
        """The agents' direct paths by their JSON-RPC path, once `app` has made them (`FrontDoor`)."""
        self.agent_mounts: AgentMounts | None = None
        self.announce: Callable[[], None] | None = None
        """Called once start-up is done, gRPC ports bound: `serve` logs its start-up banner (a2a_bridge.cli.start_banner)."""

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        await self.stores.initialize()
        self.started_at = self.clock.now()
        await self.sessions.start()
        if self.grpc is not None:
            await self._start_grpc(self.grpc)
        watch = asyncio.ensure_future(self.stores.health.watch())
        self.started = True
        if self.announce is not None:
            self.announce()
        yield
        self.started = False
        watch.cancel()
        await self.sessions.stop()
        if self.grpc_servers is not None:
            await self.grpc_servers.stop()
        for agent in self.agents.values():
            await agent.host.stop(self.security.limits.shutdown_timeout / 4)
        for connections in self.webhooks.values():
            await connections.close()
        await self.ledger.close()
        await self.stores.close()

    async def not_ready(self) -> str | None:
        """Why this process should not get requests now, or None."""
        if not self.started:
            return "starting or stopping"
        if not self.sessions.ready:
            return "the database session is lost; taking no turns"
        return await self.stores.reachable()

    async def scrape(self) -> Scrape:
        """What /metrics reads from the server: stored tasks by state, this process's session, dead replicas."""
        try:
            tasks: dict[tuple[str, str], int] | None = await self.ledger.state_counts()
        except Exception:  # noqa: BLE001 - the store is away: the task gauges go, the rest is still answered
            tasks = None
        replicas = {name: (len(a.host.replicas.dead), len(a.host.replicas.dying)) for name, a in self.agents.items()}
        return Scrape(list(self.agents), tasks, self.sessions.session, replicas)

    async def _start_grpc(self, settings: GrpcSettings) -> None:
        """Every agent on a gRPC port of its own, with the callers, limits and handler of its JSON bindings."""
        self.grpc_servers = GrpcServers(settings.host, settings.first_port, self.security.limits, self.slots)
        grpc_agents = [
            GrpcAgent(
                name,
                agent.handler,
                BridgeGrpcContextBuilder(agent.tokens, f"{settings.http}/{name}", required_extensions(agent.spec.card)),
                self.security.require_auth or agent.spec.tokens is not None,
            )
            for name, agent in self.agents.items()
        ]
        for name, port in (await self.grpc_servers.start(grpc_agents)).items():
            self.agents[name].interfaces.grpc_port = port

    def app(self) -> ASGIApp:
        """All agents, each under /{name}/, with an index at /, behind the request guard."""
        public_url = self.security.public_url

        def listed(request: Request) -> list[dict[str, str]]:
            """Each agent's name and card URL, at the address the caller used (or the public URL)."""
            base = public_url or str(request.base_url).rstrip("/")
            return [{"name": name, "card": f"{base}/{name}{CARD_PATH}"} for name in self.agents]

        async def index(request: Request) -> Response:
            return JSONResponse({"agents": listed(request)})

        async def root_card(request: Request) -> Response:
            """The server's own well-known card: the agent's when one is served (so that a client given the server's
            address finds it), else a 404 naming each agent's card, as an agent's card describes one agent."""
            if len(self.agents) == 1:
                [(name, agent)] = self.agents.items()
                return await agent.card_endpoint(request, f"/{name}", public_url)
            hint = "Several agents are served here, each with its own card: give a client an agent's URL, /{agent}"
            return problem(404, "NOT_FOUND", hint, agents=listed(request))

        async def unknown_path(request: Request, _exc: Exception) -> Response:
            """404 for a path no agent or endpoint serves, naming the agents (never the path asked for)."""
            return problem(404, "NOT_FOUND", "No agent or endpoint is served at this path", agents=listed(request))

        async def healthz(_request: Request) -> Response:
            return JSONResponse({"status": "up"})

        async def readyz(_request: Request) -> Response:
            """200 once start-up (recovery included) is done, while this process holds its database session and the
            store answers and takes writes; else 503 with the reason."""
            problem = await self.not_ready()
            if problem is not None:
                return JSONResponse({"ready": False, "reason": problem}, status_code=503)
            return JSONResponse({"ready": True, "session": self.sessions.session})

        tokens = {token: principal for agent in self.agents.values() for token, principal in agent.tokens.items()}
        metrics = metrics_endpoint(self.metrics, self.scrape, tokens, self.security.require_auth)
        demo = tokens.get(DEMO_OPERATOR_TOKEN, Principal("")).kind == "operator"
        hosts = {name: agent.host for name, agent in self.agents.items()}
        approvals = {name for name, agent in self.agents.items() if agent.spec.approvals}
        engine = self.stores.engine
        around = Surroundings(
            self.clock, self.metrics.minutes, "memory" if engine is None else engine.dialect.name, self.stores.reachable,
            lambda: self.sessions.session,
            lambda: {name: (a.host.replicas.dead, a.host.replicas.dying) for name, a in self.agents.items()},
        )
        console = Console(self.ledger, hosts, approvals, tokens, demo, around).app()
        routes: list[BaseRoute] = [
            Route("/", index, methods=["GET"]),
            Route(CARD_PATH, root_card, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Mount("/console", app=console),
        ]
        layers = {name: agent.layers(f"/{name}", public_url) for name, agent in self.agents.items()}
        mounts = {name: Mount(f"/{name}", app=agent.app) for name, agent in layers.items()}
        app = Starlette(routes=[*routes, *mounts.values()], lifespan=self.lifespan, exception_handlers={404: unknown_path})
        agent_mounts = AgentMounts(app, mounts)
        self.direct_agents = {
            f"/{name}{JSONRPC_PATH}": DirectAgent(
                mounts[name], f"/{name}", agent.direct, agent.limits, agent.gate, self.agents[name].tokens
            )
            for name, agent in layers.items()
            if agent.direct is not None and "/" not in name
        }
        self.agent_mounts = agent_mounts
        return RequestGuard(agent_mounts, self.security.allowed_hosts, public_url)

    def front(self, app: ASGIApp, draining: Draining) -> ASGIApp:
        """`FrontDoor` in front of `app`, the chain `app()` made (`draining` in it, and anything around it), for the
        agents' direct paths."""
        if self.agent_mounts is None:
            raise RuntimeError("Bridge.front comes after Bridge.app")
        return FrontDoor(app, draining, self.agent_mounts, self.security.allowed_hosts, self.direct_agents)

    def kit_app(self, name: str, public_url: str | None = None) -> ASGIApp:
        """One agent at the root of its own port, as the capture kit serves it; `public_url` is that port's address."""
        app = Starlette(routes=[Mount("", app=self.agents[name].asgi("", public_url))])
        return RequestGuard(app, self.security.allowed_hosts, public_url)
