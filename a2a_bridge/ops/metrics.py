"""Prometheus metrics at `GET /metrics`, one `CollectorRegistry` per `Bridge` (never the global one, so several
servers in one process keep theirs apart).

What moves during a request is counted at the edges, by wrappers and callbacks the bridge passes in: the request
handler every binding calls (`MeteredHandler`: requests by A2A method and outcome, open streams), the agent's executor
(`MeteredExecutor`: turn durations), the ledger's writes (`Metrics.store_write`) and the webhook sender
(`Metrics.webhook`). What the server holds (tasks by state and phase, sessions) is read when /metrics is scraped
(`Scrape`). Who may read /metrics: `may_scrape`.
"""

import collections
import ipaddress
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event, EventQueue
from a2a.server.request_handlers import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import A2AError
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from a2a_bridge.core.auth import Principal, bearer_token
from a2a_bridge.core.states import STATE_TABLE
from a2a_bridge.ops.minute_ring import MinuteRing

Result = TypeVar("Result")

TURN_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
"""Seconds: an echo's turn takes milliseconds, a deploy's minutes."""
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Seconds: a group commit on a local SQLite file takes about a millisecond, a store in trouble seconds."""
PHASES = tuple(dict.fromkeys(row.phase for row in STATE_TABLE.values()))


def outcome(error: BaseException | None) -> str:
    """A request's outcome as a label: `ok`, the A2A error's name (`TaskNotFoundError`...), else `internal`."""
    if error is None:
        return "ok"
    if isinstance(error, A2AError):
        return type(error).__name__
    return "internal"


class WebhookOutcomes:
    """Webhook delivery attempts by agent and outcome (delivered, failed, refused), and notifications given up (dead):
    counted as plain integers on the event loop, read as a counter when /metrics is scraped (a prometheus `Counter`
    takes a lock on every increment, two per delivered task)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "a2a_bridge_webhook_deliveries",
            "Webhook delivery attempts, by agent and outcome (delivered, failed, refused), and notifications given up (dead)",
            labels=["agent", "outcome"],
        )
        for (agent, outcome), count in sorted(self.counts.items()):
            family.add_metric([agent, outcome], count)
        yield family


@dataclass
class Scrape:
    """What the server holds, read at each scrape."""

    agents: list[str]
    tasks: dict[tuple[str, str], int] | None
    """Stored tasks by (agent, A2A state name); None when the store could not be read (those series go away)."""
    session: int
    """This process's session generation; 0 while it holds none (a lost database connection)."""
    replica_sessions: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per agent: other replicas' sessions holding its claims found dead, and found without their lock once."""


class Metrics:
    """The bridge's metrics in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.minutes = MinuteRing()
        """The last hour minute by minute, for the console's charts."""
        self.requests = Counter(
            "a2a_bridge_requests", "A2A requests answered, by agent, A2A method and outcome (ok or the A2A error)",
            ["agent", "method", "outcome"], registry=registry,
        )
        self.open_streams = Gauge(
            "a2a_bridge_open_streams", "A2A streams open now (SendStreamingMessage, SubscribeToTask)",
            ["agent", "method"], registry=registry,
        )
        self.turns = Histogram(
            "a2a_bridge_turn_duration_seconds", "How long the agent's execute() ran for one turn, by how it ended",
            ["agent", "outcome"], buckets=TURN_BUCKETS, registry=registry,
        )
        self.store_writes = Histogram(
            "a2a_bridge_store_write_seconds",
            "How long a write to the SQL store took, as its writer waited (group commit included), by operation",
            ["operation"], buckets=STORE_BUCKETS, registry=registry,
        )
        self._store_writes: dict[str, Histogram] = {}
        """The store-write histogram's child per operation (`labels()` costs a lock and a lookup of its own)."""
        self.webhooks = WebhookOutcomes()
        registry.register(self.webhooks)
        self.tasks = Gauge(
            "a2a_bridge_tasks", "Stored tasks by agent and A2A state, read from the store at scrape time",
            ["agent", "state"], registry=registry,
        )
        self.phases = Gauge(
            "a2a_bridge_tasks_by_phase", "Stored tasks by agent and Task Status phase, read from the store at scrape time",
            ["agent", "phase"], registry=registry,
        )
        self.session = Gauge(
            "a2a_bridge_session_held", "1 while this process holds its database session (it takes turns), else 0",
            registry=registry,
        )
        self.replica_sessions = Gauge(
            "a2a_bridge_replica_sessions",
            "Other replicas' sessions holding this agent's claims: dead (lock gone twice), suspect (gone once)",
            ["agent", "status"], registry=registry,
        )

    def store_write(self, operation: str, seconds: float) -> None:
        child = self._store_writes.get(operation)
        if child is None:
            child = self._store_writes[operation] = self.store_writes.labels(operation)
        child.observe(seconds)

    def webhook(self, agent: str) -> Callable[[str], None]:
        """What the agent's webhook sender calls with each delivery's outcome."""
        counts = self.webhooks.counts

        def count(result: str) -> None:
            counts[(agent, result)] += 1

        return count

    def exposition(self, scrape: Scrape, accept: str | None) -> tuple[bytes, str]:
        """The body and its media type in the format `accept` asks for (Prometheus text 0.0.4 by default, or
        OpenMetrics), with the gauges of what the server holds set from `scrape` first."""
        if scrape.tasks is None:
            self.tasks.clear()
            self.phases.clear()
        for agent in scrape.agents:
            if scrape.tasks is not None:
                self._set_tasks(agent, scrape.tasks)
            dead, suspect = scrape.replica_sessions.get(agent, (0, 0))
            self.replica_sessions.labels(agent, "dead").set(dead)
            self.replica_sessions.labels(agent, "suspect").set(suspect)
        self.session.set(1 if scrape.session else 0)
        encode, media_type = choose_encoder(accept)  # type: ignore[arg-type]
        return encode(self.registry), media_type

    def _set_tasks(self, agent: str, tasks: dict[tuple[str, str], int]) -> None:
        phases = dict.fromkeys(PHASES, 0)
        for state, row in STATE_TABLE.items():
            count = tasks.get((agent, state), 0)
            self.tasks.labels(agent, state).set(count)
            phases[row.phase] += count
        for phase, count in phases.items():
            self.phases.labels(agent, phase).set(count)


def may_scrape(request: Request, tokens: dict[str, Principal], require_auth: bool) -> Response | None:
    """None when the caller may read /metrics: a caller with an operator's bearer token, or (without require_auth) a
    caller on a loopback address that sends no token; else 401 (no token, or one no principal has: a mistyped
    operator token is told, even from loopback) or 403 (a principal that is not the operator)."""
    token = bearer_token(request.scope)
    principal = tokens.get(token) if token else None
    if principal is not None and principal.kind == "operator":
        return None
    client = request.scope.get("client")
    if not require_auth and not token and client is not None and _loopback(str(client[0])):
        return None
    if principal is None:
        answer = JSONResponse(
            {"error": {"code": 401, "status": "UNAUTHENTICATED", "message": "Send Authorization: Bearer <operator token>"}},
            status_code=401,
        )
        answer.headers["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return answer
    return JSONResponse(
        {"error": {"code": 403, "status": "PERMISSION_DENIED", "message": "/metrics is for the operator"}},
        status_code=403,
    )


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def metrics_endpoint(
    metrics: Metrics, scrape: Callable[[], Awaitable[Scrape]], tokens: dict[str, Principal], require_auth: bool
) -> Callable[[Request], Awaitable[Response]]:
    """`GET /metrics`: the Prometheus text format for whoever `may_scrape`."""

    async def endpoint(request: Request) -> Response:
        refused = may_scrape(request, tokens, require_auth)
        if refused is not None:
            return refused
        body, media_type = metrics.exposition(await scrape(), request.headers.get("accept"))
        return Response(body, headers={"Content-Type": media_type})

    return endpoint


class MeteredExecutor(AgentExecutor):
    """An agent's executor with each turn's `execute()` timed: outcome `returned`, `raised` or `cancelled`."""

    def __init__(self, inner: AgentExecutor, agent: str, metrics: Metrics) -> None:
        self.inner = inner
        self.minutes = metrics.minutes
        self.durations = {ended: metrics.turns.labels(agent, ended) for ended in ("returned", "raised", "cancelled")}
        """The histogram's child per outcome, taken once (`labels()` costs about three observations)."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        started = time.perf_counter()
        ended = "cancelled"
        try:
            await self.inner.execute(context, event_queue)
            ended = "returned"
        except Exception:
            ended = "raised"
            raise
        finally:
            elapsed = time.perf_counter() - started
            self.durations[ended].observe(elapsed)
            self.minutes.turn(elapsed, ended == "raised")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await self.inner.cancel(context, event_queue)


class MeteredHandler(RequestHandler):
    """The request handler every binding calls (JSON-RPC, HTTP+JSON, gRPC), each call counted by A2A method and
    outcome, and the open streams gauged."""

    def __init__(self, inner: RequestHandler, agent: str, metrics: Metrics) -> None:
        self.inner = inner
        self.agent = agent
        self.metrics = metrics
        self._counters: dict[tuple[str, str], Counter] = {}
        """The request counter's child per (method, outcome): `labels()` costs about three times an increment."""

    def _count(self, method: str, error: BaseException | None) -> None:
        key = (method, outcome(error))
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self.metrics.requests.labels(self.agent, *key)
        counter.inc()
        self.metrics.minutes.request()

    async def _counted(self, method: str, call: Awaitable[Result]) -> Result:
        error: BaseException | None = None
        try:
            return await call
        except Exception as raised:
            error = raised
            raise
        finally:
            self._count(method, error)

    async def _streamed(self, method: str, events: AsyncGenerator[Event]) -> AsyncGenerator[Event]:
        gauge = self.metrics.open_streams.labels(self.agent, method)
        gauge.inc()
        error: BaseException | None = None
        try:
            async for event in events:
                yield event
        except Exception as raised:
            error = raised
            raise
        finally:
            gauge.dec()
            self._count(method, error)

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        return await self._counted("GetTask", self.inner.on_get_task(params, context))

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        return await self._counted("ListTasks", self.inner.on_list_tasks(params, context))

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        return await self._counted("CancelTask", self.inner.on_cancel_task(params, context))

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        return await self._counted("SendMessage", self.inner.on_message_send(params, context))

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        async for event in self._streamed("SendStreamingMessage", self.inner.on_message_send_stream(params, context)):
            yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        async for event in self._streamed("SubscribeToTask", self.inner.on_subscribe_to_task(params, context)):
            yield event

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        call = self.inner.on_create_task_push_notification_config(params, context)
        return await self._counted("CreateTaskPushNotificationConfig", call)

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        call = self.inner.on_get_task_push_notification_config(params, context)
        return await self._counted("GetTaskPushNotificationConfig", call)

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        call = self.inner.on_list_task_push_notification_configs(params, context)
        return await self._counted("ListTaskPushNotificationConfigs", call)

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        call = self.inner.on_delete_task_push_notification_config(params, context)
        await self._counted("DeleteTaskPushNotificationConfig", call)

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        return await self._counted("GetExtendedAgentCard", self.inner.on_get_extended_agent_card(params, context))

