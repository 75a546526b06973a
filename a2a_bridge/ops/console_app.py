"""The operator console at /console/: the static page (a2a_bridge/ops/console/), and the operator-only JSON API and change
feed behind it.

Every API path but `/console/api/info` asks for the operator's bearer token (401 without a known token, 403 for a
principal that is not the operator); no path ever returns a token. The page keeps the token in sessionStorage, so
every response carries a Content-Security-Policy that runs only the console's own script file (no inline script, no
`javascript:` URL), and refuses framing, MIME sniffing and referrers. Its actions call the agents' own
endpoints: `POST /deployer/approve/{id}`, `POST /{agent}/tasks/{id}/reconcile`, `POST /{agent}/tasks/{id}/cancel` and
`POST /{agent}/tasks/{id}/webhooks/redeliver` (a dead letter delivered again).

The task list (`/console/api/tasks`, and the feed `/console/api/stream`) is one page, newest first, filtered by `agent`
and `state`; `next` is the cursor of the following page (`before=`). `q` searches task ids and context ids. The push
outbox's dead letters across the agents are `/console/api/webhooks/dead`; one task's answer holds its deliveries.
"""

import asyncio
import base64
import binascii
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from a2a.types import Task
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from a2a_bridge.core.auth import Principal, bearer_token, owner_context
from a2a_bridge.core.claims import AWAITING_REPLY, NEEDS_RECONCILIATION
from a2a_bridge.core.clock import iso
from a2a_bridge.core.states import STATE_TABLE, is_terminal, state_name
from a2a_bridge.core.task_status import action_requests, status_object
from a2a_bridge.http.bridge_routes import BridgeEndpoints, claim_fields, claim_view, not_found, problem
from a2a_bridge.http.webhook_routes import delivery_view
from a2a_bridge.ops.console_overview import Overview, Surroundings
from a2a_bridge.ops.timeline import timeline, waiting_on
from a2a_bridge.store.ledger import Ledger, TaskQuery, TaskRecord
from a2a_bridge.tasks.task_host import TaskHost


FILES = Path(__file__).resolve().parent / "console"
POLL = 0.5
"""Seconds the change feed waits for a change (committed here or announced by a replica) before it reads anyway."""
QUIET = 0.05
"""Seconds the change feed leaves at least between two reads, so a busy ledger is read at most twenty times a second."""
KEEPALIVE = 15.0
"""Seconds a quiet change feed waits before it sends a comment line."""
FEED_LIFETIME = 30.0
"""Seconds after which the change feed ends and the page opens it again: uvicorn waits for open responses before it
stops, so a console left open delays a shutdown by at most this long."""
DEFAULT_LIMIT = 100
MAX_LIMIT = 500
SEARCH_SCAN = 2000
"""Records one search request reads at most (newest first) looking for its text; `next` goes on from there."""
SEARCH_BATCH = 200
MAX_SEARCH = 200
FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    '<rect width="32" height="32" rx="7" fill="#19202c"/>'
    '<path d="M8 22 L13 10 L18 22 M10 18 H16" stroke="#54d68e" stroke-width="2.6" fill="none" stroke-linecap="round"/>'
    '<path d="M20 12 H25 M22.5 12 V22" stroke="#dfe5ee" stroke-width="2.6" fill="none" stroke-linecap="round"/>'
    "</svg>"
)
"""The console's icon, served as /console/favicon.svg: no file to fetch from anywhere else."""
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)
"""What every console response carries: the page runs console.js and nothing else, and no other site frames it."""

Signature = tuple[int, str, int, str | None, bool]


def signature(record: TaskRecord) -> Signature:
    """What a row shows that can change: the revision moves at every save, the claim also between saves (a lease)."""
    claim = record.claim
    lease = iso(claim.lease_until) if claim.lease_until else None
    return record.revision, claim.state, claim.claim_generation, lease, claim.cancellation_requested


def cursor_of(last: tuple[datetime, str]) -> str:
    """The opaque `next` of a page whose last record has this (created_at, task id)."""
    created, task_id = last
    return base64.urlsafe_b64encode(json.dumps([created.isoformat(), task_id]).encode()).decode()


def key(record: TaskRecord) -> tuple[datetime, str]:
    """Where a record stands in the listing's order (newest first, then by task id)."""
    return record.created_at, record.task_id


def parse_cursor(text: str) -> tuple[datetime, str] | None:
    """A cursor `cursor_of` wrote, or None."""
    try:
        created, task_id = json.loads(base64.urlsafe_b64decode(text.encode("ascii")))
        moment = datetime.fromisoformat(created)
    except (ValueError, TypeError, UnicodeError, binascii.Error):
        return None
    if not isinstance(task_id, str) or moment.tzinfo is None:
        return None
    return moment, task_id


def ended_as(task: Task) -> str | None:
    """How a terminal task ended, by its A2A state (`canceled`, `failed`...): the Task Status' `terminal_reason`
    maps several states to one reason (CANCELED to `completed`), so the console shows both."""
    if not is_terminal(task.status.state):
        return None
    return state_name(task.status.state).removeprefix("TASK_STATE_").lower()


def status_text(task: Task) -> str:
    """The text of the task's current status message."""
    if not task.status.HasField("message"):
        return ""
    return " ".join(part.text for part in task.status.message.parts if part.text)


class Console:
    """The console's API over every served agent's host and the shared ledger."""

    def __init__(
        self, ledger: Ledger, hosts: dict[str, TaskHost], approvals: set[str], tokens: dict[str, Principal], demo: bool,
        around: Surroundings,
    ) -> None:
        self.ledger = ledger
        self.hosts = hosts
        self.approvals = approvals
        self.tokens = tokens
        self.demo = demo
        """Whether the server accepts the demo operator token (no principals configured)."""
        self.around = around
        self.operators = frozenset(p.user_name for p in tokens.values() if p.kind == "operator")
        pushing = [name for name, host in sorted(hosts.items()) if host.push is not None]
        self.overview_of = Overview(ledger, sorted(hosts), pushing, approvals, self._found, around)

    def app(self) -> ASGIApp:
        return SecurityHeaders(Starlette(
            routes=[
                Route("/api/info", self.info, methods=["GET"]),
                Route("/api/overview", self.overview, methods=["GET"]),
                Route("/api/tasks", self.tasks, methods=["GET"]),
                Route("/api/tasks/{task_id}", self.task, methods=["GET"]),
                Route("/api/tasks/{task_id}/status", self.status, methods=["GET"]),
                Route("/api/tasks/{task_id}/status/stream", self.status_stream, methods=["GET"]),
                Route("/api/stream", self.stream, methods=["GET"]),
                Route("/api/webhooks/dead", self.dead_letters, methods=["GET"]),
                Route("/favicon.svg", favicon, methods=["GET"]),
                Mount("/", app=StaticFiles(directory=FILES, html=True)),
            ]
        ))

    def _refused(self, request: Request) -> Response | None:
        """None for the operator; 401 without a known bearer token, 403 for anyone else."""
        token = bearer_token(request.scope)
        principal = self.tokens.get(token) if token else None
        if principal is None:
            response = problem(401, "UNAUTHENTICATED", "Send Authorization: Bearer <operator token>")
            response.headers["WWW-Authenticate"] = 'Bearer realm="console"'
            return response
        if principal.kind != "operator":
            return problem(403, "PERMISSION_DENIED", "The console is for the operator")
        return None

    @staticmethod
    def _limit(request: Request) -> int | Response:
        text = request.query_params.get("limit", str(DEFAULT_LIMIT))
        if not (text.isascii() and text.isdigit() and len(text) <= 3) or not 1 <= int(text) <= MAX_LIMIT:
            return problem(400, "INVALID_ARGUMENT", f"limit must be a whole number from 1 to {MAX_LIMIT}")
        return int(text)

    def _query(self, request: Request) -> TaskQuery | Response:
        """The listing's filters: `agent` (a served agent), `state` (an A2A state, with or without TASK_STATE_) and
        `before` (the `next` of the page before)."""
        params = request.query_params
        agent = params.get("agent") or None
        if agent is not None and agent not in self.hosts:
            return problem(400, "INVALID_ARGUMENT", "agent must be one of the agents served here")
        state = params.get("state") or None
        if state is not None:
            state = state if state.startswith("TASK_STATE_") else f"TASK_STATE_{state.upper()}"
            if state not in STATE_TABLE:
                return problem(400, "INVALID_ARGUMENT", "state must be an A2A task state such as WORKING or CANCELED")
        before = params.get("before") or None
        after = parse_cursor(before) if before is not None else None
        if before is not None and after is None:
            return problem(400, "INVALID_ARGUMENT", "before must be the next of an earlier page")
        return TaskQuery(agent, state, after)

    def actions(self, task: Task, record: TaskRecord) -> list[str]:
        """What the operator may do now: approve a deploy waiting for approval, reconcile, cancel."""
        allowed = []
        if (
            record.agent in self.approvals
            and record.claim.state == AWAITING_REPLY
            and any(r.actor == "operator" and r.action == "approve" for r in action_requests(task))
        ):
            allowed.append("approve")
        if record.claim.state == NEEDS_RECONCILIATION:
            allowed.append("reconcile")
        if not is_terminal(task.status.state):
            allowed.append("cancel")
        return allowed

    async def _found(self, record: TaskRecord) -> tuple[Task, TaskRecord] | None:
        """The task and its freshest record (the live one while a turn runs here), for an agent served here."""
        host = self.hosts.get(record.agent)
        if host is None:
            return None
        return await host.task_and_record(record.task_id, owner_context(record.owner))

    def row(self, task: Task, record: TaskRecord) -> dict[str, Any]:
        """One task in the three views: A2A state, Task Status (phase, notifications) and claim."""
        claim = record.claim
        return {
            "id": task.id,
            "agent": record.agent,
            "created_at": iso(record.created_at),
            "context_id": task.context_id,
            "state": state_name(task.status.state),
            "ended": ended_as(task),
            "message": status_text(task),
            "status": status_object(task, record)["status"],
            "claim": claim_fields(claim),
            "actions": self.actions(task, record),
            "waiting": waiting_on(task, record, [], self.around.clock.now()),
        }

    async def rows(self, records: list[TaskRecord]) -> list[dict[str, Any]]:
        rows = []
        for record in records:
            found = await self._found(record)
            if found is not None:
                rows.append(self.row(*found))
        return rows

    async def info(self, request: Request) -> Response:
        """What the sign-in page may show anyone: the agents, and whether the server accepts the demo operator token
        (never a token itself)."""
        return JSONResponse({"agents": sorted(self.hosts), "demo": self.demo})

    async def tasks(self, request: Request) -> Response:
        """One page of tasks across the agents, newest first, filtered by `agent` and `state`, and by `q` (text in
        the task id or the context id); `next` names the following page (`before=`), null after the last."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        limit = self._limit(request)
        if isinstance(limit, Response):
            return limit
        query = self._query(request)
        if isinstance(query, Response):
            return query
        text = request.query_params.get("q", "").strip()
        if len(text) > MAX_SEARCH:
            return problem(400, "INVALID_ARGUMENT", f"q must be at most {MAX_SEARCH} characters")
        if text:
            rows, next_page = await self._search(text, limit, query)
        else:
            records = await self.ledger.recent(limit + 1, query)
            rows = await self.rows(records[:limit])
            next_page = cursor_of(key(records[limit - 1])) if len(records) > limit else None
        return JSONResponse({"tasks": rows, "next": next_page})

    async def _search(self, text: str, limit: int, query: TaskQuery) -> tuple[list[dict[str, Any]], str | None]:
        """The rows whose task id or context id holds `text`, reading at most SEARCH_SCAN records from the query's
        cursor on; the cursor to go on from (past the last row, or past the last record read), None at the end."""
        rows: list[dict[str, Any]] = []
        scanned = 0
        while scanned < SEARCH_SCAN:
            batch = await self.ledger.recent(SEARCH_BATCH, query)
            for record in batch:
                scanned += 1
                query = replace(query, after=key(record))
                found = await self._found(record)
                if found is not None and (text in found[0].id or text in found[0].context_id):
                    rows.append(self.row(*found))
                    if len(rows) == limit:
                        more = await self.ledger.recent(1, query)
                        return rows, cursor_of(key(record)) if more else None
            if len(batch) < SEARCH_BATCH:
                return rows, None
        return rows, cursor_of(query.after) if query.after is not None else None

    async def task(self, request: Request) -> Response:
        """One task: its row, the A2A task (history, artifacts), the claim view with its events and evidence, and its
        webhook deliveries (one per push config with events still to deliver or given up)."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        task_id = request.path_params["task_id"]
        record = await self.ledger.get(task_id)
        found = await self._found(record) if record is not None else None
        if found is None:
            return not_found(task_id)
        task, live = found
        events = await self.ledger.claim_events(task_id)
        deliveries = await self.ledger.deliveries(live.agent, task_id=task_id)
        return JSONResponse(
            {
                "row": self.row(task, live),
                "task": MessageToDict(task),
                "claim": claim_view(live, events),
                "webhooks": [delivery_view(d) for d in deliveries],
                "timeline": timeline(task, live, events, deliveries, self.operators),
                "waiting": waiting_on(task, live, events, self.around.clock.now()),
            }
        )

    async def overview(self, request: Request) -> Response:
        """The overview: tasks counted by agent, phase, A2A and claim state; the attention queue; the last hour's
        traffic; sessions and replicas; the store's health."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        return JSONResponse(await self.overview_of.view())

    async def dead_letters(self, request: Request) -> Response:
        """The push outbox's dead letters across the agents, the latest to start failing first, each with its agent."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        letters = [
            letter
            for name, host in sorted(self.hosts.items())
            if host.push is not None
            for letter in await self.ledger.deliveries(name, dead=True)
        ]
        letters.sort(key=lambda d: d.failing_since.timestamp() if d.failing_since is not None else 0.0, reverse=True)
        return JSONResponse({"deadLetters": [{"agent": d.agent, **delivery_view(d)} for d in letters]})

    async def _as_owner(self, request: Request) -> BridgeEndpoints | Response:
        """The task's agent's Task Status endpoints, answering as the task's owner: the operator reads any task."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        task_id = request.path_params["task_id"]
        record = await self.ledger.get(task_id)
        host = self.hosts.get(record.agent) if record is not None else None
        if record is None or host is None:
            return not_found(task_id)
        owner = owner_context(record.owner)
        return BridgeEndpoints(host, lambda _: owner, lambda _: False, False, lambda _: "")

    async def status(self, request: Request) -> Response:
        """The task's Task Status object, as `GET /{agent}/tasks/{id}/status` gives its owner (ETag, 304, ?wait=S)."""
        endpoints = await self._as_owner(request)
        return endpoints if isinstance(endpoints, Response) else await endpoints.status(request)

    async def status_stream(self, request: Request) -> Response:
        """The task's Task Status as Server-Sent Events, as `GET /{agent}/tasks/{id}/status/stream` gives its owner."""
        endpoints = await self._as_owner(request)
        return endpoints if isinstance(endpoints, Response) else await endpoints.status_stream(request)

    async def stream(self, request: Request) -> Response:
        """Server-Sent Events: `tasks` with every row first, then the rows that changed, read from the ledger at each
        change (any replica's, announced by NOTIFY) and every half second anyway; ends when the client leaves or after
        FEED_LIFETIME."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        limit = self._limit(request)
        if isinstance(limit, Response):
            return limit
        query = self._query(request)
        if isinstance(query, Response):
            return query
        frames = self._frames(limit, query)
        return StreamingResponse(frames, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def _frames(self, limit: int, query: TaskQuery = TaskQuery()) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        ends = loop.time() + FEED_LIFETIME
        sent: dict[str, Signature] | None = None
        quiet_since = loop.time()
        while loop.time() < ends:
            wake = self.ledger.changed()
            held = await self.ledger.recent(limit + 1, query)
            records = held[:limit]
            current = {record.task_id: signature(record) for record in records}
            changed = [record for record in records if sent is None or sent.get(record.task_id) != current[record.task_id]]
            if sent is None or changed or current.keys() != sent.keys():
                body = {
                    "snapshot": sent is None,
                    "tasks": await self.rows(changed),
                    "ids": list(current),
                    "next": cursor_of(key(records[-1])) if len(held) > limit else None,
                }
                yield f"event: tasks\ndata: {json.dumps(body)}\n\n"
                quiet_since = loop.time()
            elif loop.time() - quiet_since >= KEEPALIVE:
                yield ": keepalive\n\n"
                quiet_since = loop.time()
            sent = current
            await asyncio.sleep(QUIET)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), POLL)


class SecurityHeaders:
    """ASGI: adds SECURITY_HEADERS to every response of the app it wraps."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers if scope["type"] == "http" else send)


async def favicon(_request: Request) -> Response:
    return Response(FAVICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})
