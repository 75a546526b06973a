"""Assembles the Starlette application: each agent's card, both A2A bindings and its operator endpoints."""

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_rest_routes
from a2a.types import AgentCard, AgentInterface
from a2a.utils.signing import create_agent_card_signer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Scope

from a2a_bridge.auth import BearerGate, BridgeContextBuilder, Principal, bearer_token, header, is_operator, public_base
from a2a_bridge.bridge_routes import ActionRoute, BridgeEndpoints, StatusPolls
from a2a_bridge.clock import Clock
from a2a_bridge.config import SecurityConfig
from a2a_bridge.console_app import console_app
from a2a_bridge.direct_rpc import DirectRpc
from a2a_bridge.handler import BridgeRequestHandler
from a2a_bridge.jsonrpc import BridgeJsonRpcDispatcher, jsonrpc_routes
from a2a_bridge.limits import RequestLimits, StreamSlots
from a2a_bridge.media_type import A2AJsonErrors
from a2a_bridge.push import PushDispatcher, WebhookPolicy, webhook_client
from a2a_bridge.rest_errors import RestErrorText
from a2a_bridge.store import Stores
from a2a_bridge.host_env import HostSettings
from a2a_bridge.sessions import SessionKeeper
from a2a_bridge.task_host import TaskHost

CARD_PATH = "/.well-known/agent-card.json"
JSONRPC_PATH = "/a2a/jsonrpc"
REST_PATH = "/a2a/rest"
TASKS_PATH = "/tasks/"
APPROVE_PATH = "/approve/"


@dataclass
class AgentSpec:
    """One agent as the bridge serves it."""

    name: str
    card: AgentCard
    executor: AgentExecutor
    extended_card: AgentCard | None = None
    tokens: dict[str, Principal] | None = None
    """The agent's own demo tokens; an agent with tokens requires one (401 otherwise). Not used under require_auth."""
    signing_key: str | None = None
    approvals: bool = False
    actions: tuple[ActionRoute, ...] = ()
    """The who-must-act requests its users answer through the bridge (POST /tasks/{id}/{path})."""
    retries: bool = True
    """Whether a messageId a caller sends again is a retry of that message (idempotent); off only where a client
    reuses messageIds by design."""


@dataclass
class ServedAgent:
    """An agent wired to its store and handler; shared by every address it is served at."""

    spec: AgentSpec
    host: TaskHost
    handler: BridgeRequestHandler
    tokens: dict[str, Principal] = field(default_factory=dict)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    slots: StreamSlots = field(default_factory=lambda: StreamSlots(SecurityConfig().limits.max_streams))
    """Streams open per principal, shared with the bridge's other agents."""
    direct_rpc: bool = True
    """Whether `SendMessage` and `GetTask` over JSON-RPC take the direct path (`a2a_bridge.direct_rpc`)."""

    def card_for(self, base: str) -> AgentCard:
        """The public card with interface URLs that work from the caller's side, signed when a key is set."""
        card = AgentCard()
        card.CopyFrom(self.spec.card)
        card.supported_interfaces.extend(interfaces(base))
        if self.spec.signing_key:
            sign = create_agent_card_signer(
                self.spec.signing_key, {"alg": "HS256", "typ": "JOSE", "kid": f"{self.spec.name}-key-1"}  # type: ignore[typeddict-item]
            )
            card = sign(card)
        return card

    def routes(self, builder: BridgeContextBuilder, dispatcher: BridgeJsonRpcDispatcher) -> list[BaseRoute]:
        """Card, JSON-RPC, HTTP+JSON and operator routes, relative to where the agent is mounted."""

        async def card(request: Request) -> Response:
            return JSONResponse(agent_card_to_dict(self.card_for(public_base(request, builder.base_path))))

        open_approvals = not self.security.require_auth
        endpoints = BridgeEndpoints(self.host, builder.identity, is_operator, open_approvals)
        routes: list[BaseRoute] = [Route(CARD_PATH, card, methods=["GET"])]
        # Before the REST routes: their catch-all /{tenant} mount would otherwise take these paths and answer 404.
        routes += endpoints.routes(self.spec.approvals, self.spec.actions)
        routes += jsonrpc_routes(dispatcher, JSONRPC_PATH)
        routes += create_rest_routes(self.handler, context_builder=builder, path_prefix=REST_PATH)
        return routes

    def principal_name(self, scope: Scope) -> str:
        """The principal a request's bearer token names ('' for the anonymous principal)."""
        token = bearer_token({"authorization": header(scope, b"authorization") or ""})
        principal = self.tokens.get(token) if token else None
        return principal.name if principal is not None else ""

    def asgi(self, base_path: str) -> ASGIApp:
        """The agent's routes behind the request limits, and behind the bearer gate when the agent requires a token
        (every agent under require_auth, the approval link too); the direct path for the hot JSON-RPC methods right
        behind the limits, and the unchanged Task Status poll (304) in front of them."""
        builder = BridgeContextBuilder(self.tokens, base_path)
        dispatcher = BridgeJsonRpcDispatcher(self.handler, context_builder=builder)
        app: ASGIApp = RestErrorText(Starlette(routes=self.routes(builder, dispatcher)), REST_PATH)
        if self.direct_rpc:
            app = DirectRpc(app, self.handler, builder, dispatcher, JSONRPC_PATH)
        app = RequestLimits(app, self.security.limits, self.slots, self.principal_name, JSONRPC_PATH)
        app = A2AJsonErrors(app, REST_PATH)
        app = StatusPolls(app, self.host, self.principal_name)
        if self.security.require_auth:
            protected = (JSONRPC_PATH, REST_PATH, TASKS_PATH, APPROVE_PATH)
            app = BearerGate(app, self.spec.name, self.tokens, protected=protected)
        elif self.spec.tokens is not None:
            app = BearerGate(app, self.spec.name, self.tokens, protected=(JSONRPC_PATH, REST_PATH, TASKS_PATH))
        return app


def interfaces(base: str) -> list[AgentInterface]:
    return [
        AgentInterface(url=f"{base}{JSONRPC_PATH}", protocol_binding="JSONRPC", protocol_version="1.0"),
        AgentInterface(url=f"{base}{REST_PATH}", protocol_binding="HTTP+JSON", protocol_version="1.0"),
    ]


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
    ) -> None:
        """`principals` add to those of `security`; under `security.require_auth` the agents' demo tokens are not
        accepted. `direct_rpc=False` leaves every JSON-RPC request to the SDK's dispatcher."""
        self.stores = stores
        self.clock = clock
        self.ledger = stores.ledger()
        self.security = security or SecurityConfig()
        self.principals = {**self.security.principals, **(principals or {})}
        self.slots = StreamSlots(self.security.limits.max_streams)
        policy = WebhookPolicy(self.security.webhook_networks)
        self.webhooks = webhook_client(policy)
        self.agents: dict[str, ServedAgent] = {}
        base = settings or HostSettings()
        for spec in specs:
            task_store, push_store = stores.for_agent(spec.name)
            push_enabled = spec.card.capabilities.push_notifications
            push = PushDispatcher.over(self.webhooks, push_store, policy) if push_enabled else None
            host = TaskHost(
                spec.name,
                spec.executor,
                task_store,
                self.ledger,
                push_store if push_enabled else None,
                push,
                clock,
                new_id,
                replace(base, repeat_safe=getattr(spec.executor, "repeat_safe", True)),
            )
            handler = BridgeRequestHandler(
                spec.card, host, spec.extended_card, interfaces, spec.retries, self.security.limits, policy
            )
            demo_tokens = {} if self.security.require_auth else spec.tokens or {}
            tokens = {**self.principals, **demo_tokens}
            self.agents[spec.name] = ServedAgent(spec, host, handler, tokens, self.security, self.slots, direct_rpc)
        self.sessions = SessionKeeper(self.ledger, [agent.host for agent in self.agents.values()], clock)

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        await self.stores.initialize()
        await self.sessions.start()
        yield
        await self.sessions.stop()
        for agent in self.agents.values():
            await agent.host.stop()
        for agent in self.agents.values():
            if agent.host.push is not None:
                await agent.host.push.drain()
        await self.webhooks.aclose()
        await self.ledger.close()
        await self.stores.close()

    def app(self) -> Starlette:
        """All agents, each under /{name}/, with an index at /."""

        async def index(request: Request) -> Response:
            base = str(request.base_url).rstrip("/")
            return JSONResponse(
                {
                    "agents": [
                        {"name": name, "card": f"{base}/{name}{CARD_PATH}"}
                        for name in self.agents
                    ]
                }
            )

        async def ready(_request: Request) -> Response:
            """Readiness: 200 while this process holds its database session and takes turns, else 503."""
            if self.sessions.ready:
                return JSONResponse({"ready": True, "session": self.sessions.session})
            return JSONResponse({"ready": False, "reason": "the database session is lost; taking no turns"}, status_code=503)

        routes: list[BaseRoute] = [
            Route("/", index, methods=["GET"]),
            Route("/ready", ready, methods=["GET"]),
            Mount("/console", app=console_app(self)),
        ]
        routes += [Mount(f"/{name}", app=agent.asgi(f"/{name}")) for name, agent in self.agents.items()]
        return Starlette(routes=routes, lifespan=self.lifespan)

    def kit_app(self, name: str) -> Starlette:
        """One agent at the root of its own port, as the capture kit serves it."""
        return Starlette(routes=[Mount("", app=self.agents[name].asgi(""))])
