"""The bridge's own endpoints beside A2A: Task Status (poll, long poll, SSE), the claim view, approval, reconcile,
and the who-must-act answers (authorize a provider, decide a review)."""

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.types import TaskState
from a2a.utils.errors import A2AError
from sqlalchemy.exc import DBAPIError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from a2a_bridge.core.auth import Principal, caller_name, header, may_see, owner_context, route_path
from a2a_bridge.core.claims import AWAITING_REPLY, Claim, ClaimError
from a2a_bridge.core.clock import iso
from a2a_bridge.core.states import state_name
from a2a_bridge.core.task_status import action_requests, status_object
from a2a_bridge.store.ledger import TaskRecord
from a2a_bridge.store.store_faults import OUTAGE, StoreUnavailable, transient
from a2a_bridge.http.operator_reasons import BadReason, optional_reason, reason_in, with_reason
from a2a_bridge.tasks.live_tasks import OPERATOR_REASON, REQUESTED_BY
from a2a_bridge.tasks.task_host import TaskHost

MAX_WAIT = 60.0
CROSS_PROCESS_POLL = 0.5
"""How often a waiting request rereads the ledger, for changes made by another replica."""
KEEPALIVE = 15.0
"""Seconds a quiet status stream waits before it sends a comment line to keep the connection open."""
OUTCOMES = ("completed", "cancelled", "continue", "uncertain")
APPROVED = "approved"

Caller = Callable[[Request], ServerCallContext]
ANONYMOUS = "anonymous"
"""How claim evidence names an anonymous caller who acted."""


@dataclass(frozen=True)
class ActionRoute:
    """A who-must-act request answered outside A2A: `POST /tasks/{id}/{path}` with `{field: value}` from the user who
    must act resumes the task with the signal `{signal}:{value}`."""

    path: str
    action: str
    field: str
    signal: str
    choices: tuple[str, ...] = ()
    """The values `field` may take; empty when it must name the provider of a pending request."""

    def body(self) -> str:
        """The JSON body the endpoint takes, as a hint: `{"decision": "post"|"discard"}`, `{"provider": NAME}`."""
        values = "|".join(f'"{choice}"' for choice in self.choices) or "NAME"
        return f'{{"{self.field}": {values}}}'


AUTHORIZE = ActionRoute("authorize", "authorize_provider", "provider", "authorized")
REVIEW = ActionRoute("review", "review", "decision", "review", choices=("post", "discard"))


def may_act(caller: ServerCallContext, record: TaskRecord) -> bool:
    """Whether the caller is the person who must act: the task's responsible user, whoever an entry names (an entry's
    `user` may come from what the requester wrote, and a delegate or another user never answers a person's step). An
    anonymous task is shared by every anonymous caller, so they act on it."""
    name = caller_name(caller)
    if not name:
        return not record.owner
    principal = caller.user
    return name == record.responsible_user and not (isinstance(principal, Principal) and principal.kind == "agent")


def actor(name: str) -> str:
    """Who acted, as claim evidence names them: the principal's name ('' for an anonymous caller), or anonymous."""
    return name or ANONYMOUS


def problem(code: int, status: str, message: str, **details: Any) -> JSONResponse:
    """An error body in the shape of the HTTP+JSON binding's errors."""
    return JSONResponse({"error": {"code": code, "status": status, "message": message, **details}}, status_code=code)


OTHER_METHODS = ["GET", "PUT", "PATCH", "DELETE"]
"""The methods a POST-only endpoint answers 405 (HEAD comes with GET)."""


def post_only(hint: str) -> Callable[[Request], Awaitable[Response]]:
    """The 405 of a POST-only endpoint (approve, review, …) opened with another method, such as a browser's GET."""

    async def endpoint(_request: Request) -> Response:
        answer = problem(405, "METHOD_NOT_ALLOWED", f"This link takes POST, not a browser's GET: {hint}")
        answer.headers["Allow"] = "POST"
        return answer

    return endpoint


def not_found(task_id: str) -> JSONResponse:
    return problem(404, "NOT_FOUND", "Task not found", taskId=task_id)


def store_unavailable(task_id: str) -> JSONResponse:
    """503: the store did not take the change; nothing was done that is not stored (a retry is safe)."""
    return problem(503, "UNAVAILABLE", "Store unavailable: the change was not stored", taskId=task_id)


async def store_outage(request: Request, error: Exception) -> Response:
    """The bridge's endpoints' answer to a store that failed under them: 503 "store unavailable" for a transient
    failure (the outage logged once, never a traceback per request); anything else is the server's error, as before."""
    if not transient(error):
        raise error
    OUTAGE.refuse(error)
    return problem(503, "UNAVAILABLE", "Store unavailable: try again shortly", taskId=request.path_params.get("task_id"))


STORE_ERRORS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {DBAPIError: store_outage, OSError: store_outage}
"""The exception handlers an agent's routes answer a store's failure with (Starlette's `exception_handlers`)."""


def claim_fields(claim: Claim) -> dict[str, Any]:
    """The claim's own fields, as the claim view and the console show them."""
    return {
        "state": claim.state,
        "claim_generation": claim.claim_generation,
        "session_generation": claim.session_generation,
        "lease_until": iso(claim.lease_until) if claim.lease_until else None,
        "cancellation_requested": claim.cancellation_requested,
        "stage": claim.stage,
    }


CLAIM_EVENT_FIELDS = ("claim_generation", "operation", "state", "evidence", "at")
"""What the claim view shows of each event (the ledger keeps each one's session and lease too, for the console)."""


def claim_event_fields(event: dict[str, Any]) -> dict[str, Any]:
    return {name: event[name] for name in CLAIM_EVENT_FIELDS}


def claim_view(record: TaskRecord, events: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "taskId": record.task_id,
        "agent": record.agent,
        **claim_fields(record.claim),
        "events": [{**claim_event_fields(event), "at": iso(event["at"])} for event in events],
    }


def without_failure(event: dict[str, Any]) -> dict[str, Any]:
    """A claim event as the task's owner reads it: a failed turn's exception (`failure`) is the operator's to read,
    the owner has the task's generic message."""
    evidence = event["evidence"]
    if not isinstance(evidence, dict) or "failure" not in evidence:
        return event
    return {**event, "evidence": {k: v for k, v in evidence.items() if k != "failure"}}


class BridgeEndpoints:
    """The endpoints of one agent; `caller` says who is asking, `is_operator` whether they may act as an operator."""

    def __init__(
        self,
        host: TaskHost,
        caller: Caller,
        is_operator: Callable[[ServerCallContext], bool],
        open_approvals: bool,
        base_url: Callable[[Request], str],
        demo_owners: frozenset[str] = frozenset({""}),
    ) -> None:
        self.host = host
        self.caller = caller
        self.is_operator = is_operator
        self.open_approvals = open_approvals
        """Whether an anonymous caller may approve, as the kit's operator does without a token (not under
        require_auth), the tasks of `demo_owners`."""
        self.base_url = base_url
        """The agent's base URL for the links its next turn writes."""
        self.demo_owners = demo_owners
        """The owners whose tasks open approvals cover: the anonymous owner and the agent's demo principals, never a
        configured user."""

    def routes(self, approvals: bool, actions: tuple[ActionRoute, ...] = ()) -> list[BaseRoute]:
        routes: list[BaseRoute] = [
            Route("/tasks/{task_id}/status", self.status, methods=["GET"]),
            Route("/tasks/{task_id}/status/stream", self.status_stream, methods=["GET"]),
            Route("/tasks/{task_id}/claim", self.claim, methods=["GET"]),
            Route("/tasks/{task_id}/reconcile", self.reconcile, methods=["POST"]),
            Route("/tasks/{task_id}/cancel", self.cancel, methods=["POST"]),
        ]
        if approvals:
            routes.append(Route("/approve/{task_id}", self.approve, methods=["POST"]))
        for action in actions:
            routes.append(Route(f"/tasks/{{task_id}}/{action.path}", self.answering(action), methods=["POST"]))
        operator = "with the operator's bearer token"
        hints = {
            "/tasks/{task_id}/reconcile": f'POST {{"outcome": "completed"|"cancelled"|"continue"|"uncertain"}} {operator}',
            "/tasks/{task_id}/cancel": f"POST {operator}",
            **({"/approve/{task_id}": f"POST {operator}"} if approvals else {}),
            **{f"/tasks/{{task_id}}/{action.path}": f"POST {action.body()}" for action in actions},
        }
        return routes + [Route(path, post_only(hint), methods=OTHER_METHODS) for path, hint in hints.items()]

    async def _reader(self, task_id: str, context: ServerCallContext) -> ServerCallContext:
        """Whom a status view is read as: an operator reads any task of this agent as its owner, anyone else as
        themself (who may see it)."""
        if not self.is_operator(context):
            return context
        record = await self.host.ledger.get(task_id)
        if record is None or record.agent != self.host.agent:
            return context
        return owner_context(record.owner)

    async def _view(self, task_id: str, context: ServerCallContext) -> tuple[dict[str, Any], TaskRecord] | None:
        found = await self.host.task_and_record(task_id, context)
        if found is None:
            return None
        task, record = found
        return status_object(task, record), record

    async def _changed(self, task_id: str, context: ServerCallContext, revision: int, timeout: float) -> None:
        """Return when the task's revision differs from `revision`, or when `timeout` seconds have passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0:
            change = self.host.changed(task_id)
            current = await self.host.task_and_record(task_id, context)
            if current is None or current[1].revision != revision:
                return
            try:
                await asyncio.wait_for(change.wait(), min(left, CROSS_PROCESS_POLL))
            except TimeoutError:
                continue

    async def status(self, request: Request) -> Response:
        """The Task Status object; ETag is the revision, If-None-Match answers 304, ?wait=S long-polls."""
        task_id = request.path_params["task_id"]
        context = self.caller(request)
        wait_text = request.query_params.get("wait")
        try:
            wait = float(wait_text) if wait_text is not None else 0.0
        except ValueError:
            wait = -1.0
        if not 0 <= wait <= MAX_WAIT:
            return problem(400, "INVALID_ARGUMENT", f"wait must be a number of seconds from 0 to {int(MAX_WAIT)}")
        context = await self._reader(task_id, context)
        view = await self._view(task_id, context)
        if view is None:
            return not_found(task_id)
        body, record = view
        seen = request.headers.get("if-none-match")
        if wait > 0 and (seen is None or matches(seen, etag(record))):
            await self._changed(task_id, context, record.revision, wait)
            view = await self._view(task_id, context)
            if view is None:
                return not_found(task_id)
            body, record = view
        if matches(seen, etag(record)):
            return Response(status_code=304, headers={"ETag": etag(record)})
        return JSONResponse(body, headers={"ETag": etag(record)})

    async def status_stream(self, request: Request) -> Response:
        """The status object as Server-Sent Events on every change, closed after the terminal one."""
        task_id = request.path_params["task_id"]
        context = await self._reader(task_id, self.caller(request))
        view = await self._view(task_id, context)
        if view is None:
            return not_found(task_id)

        async def frames() -> AsyncIterator[str]:
            current: tuple[dict[str, Any], TaskRecord] | None = view
            sent: int | None = None
            while current is not None:
                body, record = current
                if record.revision == sent:
                    yield ": keepalive\n\n"
                else:
                    yield f"id: {record.revision}\ndata: {json.dumps(body)}\n\n"
                    sent = record.revision
                if body["status"]["phase"] == "terminal":
                    return
                await self._changed(task_id, context, record.revision, KEEPALIVE)
                current = await self._view(task_id, context)

        return StreamingResponse(frames(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def claim(self, request: Request) -> Response:
        """The claim view: state, generations, lease, cancellation and the events posted with their evidence."""
        task_id = request.path_params["task_id"]
        record = await self._record_for(request, task_id)
        if record is None:
            return not_found(task_id)
        events = await self.host.ledger.claim_events(task_id)
        if not self.is_operator(self.caller(request)):
            events = [without_failure(event) for event in events]
        return JSONResponse(claim_view(record, events))

    async def _record_for(self, request: Request, task_id: str) -> TaskRecord | None:
        """The record of a task the caller owns, or of any task of this agent for an operator."""
        context = self.caller(request)
        record = await self.host.ledger.get(task_id)
        if record is None or record.agent != self.host.agent:
            return None
        if not may_see(record.owner, record.responsible_user, context) and not self.is_operator(context):
            return None
        live = await self.host.task_and_record(task_id, owner_context(record.owner))
        return live[1] if live is not None else record

    async def reconcile(self, request: Request) -> Response:
        """An operator reports a reconciled outcome with evidence: completed, cancelled, continue or uncertain."""
        task_id = request.path_params["task_id"]
        if not self.is_operator(self.caller(request)):
            return not_found(task_id)
        try:
            body = await request.json()
        except ValueError:
            return problem(400, "INVALID_ARGUMENT", "the body must be a JSON object")
        outcome = body.get("outcome") if isinstance(body, dict) else None
        evidence = body.get("evidence") if isinstance(body, dict) else None
        if outcome not in OUTCOMES or not isinstance(evidence, dict) or not evidence:
            return problem(
                400, "INVALID_ARGUMENT", "send {\"outcome\": completed|cancelled|continue|uncertain, \"evidence\": {...}}"
            )
        try:
            reason = reason_in(body)
        except BadReason as bad:
            return problem(400, "INVALID_ARGUMENT", str(bad))
        if await self.host.ledger.get(task_id) is None:
            return not_found(task_id)
        try:
            record = await self.host.reconcile(task_id, outcome, with_reason(evidence, reason))
        except ClaimError as refused:
            return problem(409, "FAILED_PRECONDITION", refused.detail, reason=refused.reason, taskId=task_id)
        except StoreUnavailable:
            return store_unavailable(task_id)
        return JSONResponse(claim_view(record, await self.host.ledger.claim_events(task_id)))

    async def cancel(self, request: Request) -> Response:
        """An operator cancels any task of this agent, in its owner's name (A2A CancelTask lets only the owner)."""
        task_id = request.path_params["task_id"]
        caller = self.caller(request)
        record = await self.host.ledger.get(task_id)
        if not self.is_operator(caller) or record is None or record.agent != self.host.agent:
            return not_found(task_id)
        try:
            reason = await optional_reason(request)
        except BadReason as bad:
            return problem(400, "INVALID_ARGUMENT", str(bad), taskId=task_id)
        owner = owner_context(record.owner)
        owner.state[REQUESTED_BY] = caller.user.user_name
        owner.state[OPERATOR_REASON] = reason
        try:
            task = await self.host.cancel(task_id, owner)
        except StoreUnavailable:
            return store_unavailable(task_id)
        except A2AError as refused:
            return problem(409, "FAILED_PRECONDITION", refused.message, taskId=task_id)
        except ClaimError as refused:
            return problem(409, "FAILED_PRECONDITION", refused.detail, reason=refused.reason, taskId=task_id)
        return JSONResponse({"taskId": task_id, "state": state_name(task.status.state)})

    async def approve(self, request: Request) -> Response:
        """An operator approves a deploy waiting in AUTH_REQUIRED, outside A2A (with open approvals, as in the kit, an
        anonymous caller too, on a task of the demo's principals); anyone else is told the task does not exist. The
        record is read for every caller, so that a refusal and an unknown id cost the same."""
        task_id = request.path_params["task_id"]
        caller = self.caller(request)
        record = await self.host.ledger.get(task_id)
        if record is None or record.agent != self.host.agent or not self.may_approve(caller, record):
            return not_found(task_id)
        try:
            reason = await optional_reason(request)
        except BadReason as bad:
            return problem(400, "INVALID_ARGUMENT", str(bad), taskId=task_id)
        owner = owner_context(record.owner)
        task = await self.host.get(task_id, owner)
        if task is None:
            return not_found(task_id)
        if (
            task.status.state != TaskState.TASK_STATE_AUTH_REQUIRED
            or record.claim.state != "awaiting_reply"
            or not any(r.actor == "operator" and r.action == "approve" for r in action_requests(task))
        ):
            return problem(409, "FAILED_PRECONDITION", "Task is not waiting for approval", taskId=task_id)
        evidence = with_reason({"signal": APPROVED, "by": actor(caller_name(caller))}, reason)
        refused = await self._resumed(task_id, owner, APPROVED, evidence)
        return refused or JSONResponse({"approved": True, "taskId": task_id})

    async def _resumed(
        self, task_id: str, owner: ServerCallContext, signal: str, evidence: dict[str, Any]
    ) -> Response | None:
        """Resume a task with a signal; None once its claim is stored, else the answer that says why not."""
        try:
            await self.host.resume(task_id, owner, signal, evidence)
        except ClaimError as refused:
            return problem(409, "FAILED_PRECONDITION", "Task is already resuming", reason=refused.reason, taskId=task_id)
        except StoreUnavailable:
            return store_unavailable(task_id)
        return None

    def may_approve(self, caller: ServerCallContext, record: TaskRecord) -> bool:
        """An operator, any task of this agent; with open approvals an anonymous caller, a task of the demo."""
        if self.is_operator(caller):
            return True
        return self.open_approvals and not caller_name(caller) and record.owner in self.demo_owners

    def answering(self, route: ActionRoute) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await self.answer(route, request)

        return endpoint

    async def answer(self, route: ActionRoute, request: Request) -> Response:
        """The user who must act answers a pending request of the route's action; anyone else is told the task does
        not exist. As for approve, the record is read for every caller and who may act decided from it before the task
        is read, so that a refusal and an unknown id do the same work."""
        task_id = request.path_params["task_id"]
        context = self.caller(request)
        caller = caller_name(context)
        record = await self.host.ledger.get(task_id)
        if record is None or record.agent != self.host.agent or not may_act(context, record):
            return not_found(task_id)
        owner = owner_context(record.owner)
        found = await self.host.task_and_record(task_id, owner)
        if found is None:
            return not_found(task_id)
        task, record = found
        pending = [r for r in action_requests(task) if r.actor == "user" and r.action == route.action]
        if not pending or not may_act(context, record):
            return not_found(task_id)
        try:
            body = await request.json()
        except ValueError:
            body = None
        value = body.get(route.field) if isinstance(body, dict) else None
        allowed = route.choices or tuple(dict.fromkeys(r.provider for r in pending if r.provider))
        if value not in allowed:
            return problem(400, "INVALID_ARGUMENT", f"send {{\"{route.field}\": {'|'.join(allowed)}}}", taskId=task_id)
        if record.claim.state != AWAITING_REPLY:
            return problem(409, "FAILED_PRECONDITION", "Task is already resuming", taskId=task_id)
        signal = f"{route.signal}:{value}"
        owner.state["base_url"] = self.base_url(request)
        refused = await self._resumed(task_id, owner, signal, {"signal": signal, "by": actor(caller)})
        return refused or JSONResponse({"taskId": task_id, route.field: value, "signal": signal})


class StatusPolls:
    """ASGI, in front of an agent's routes: answers a Task Status poll whose If-None-Match names the task's current
    revision (304) without routing or building the status object, the hottest request a polling consumer sends;
    everything else, a first poll, a changed task, `?wait=` or an unknown task included, goes on to `status`."""

    def __init__(self, app: ASGIApp, host: TaskHost, principal: Callable[[Scope], str]) -> None:
        self.app = app
        self.host = host
        self.principal = principal
        """The caller's principal name from the request's bearer token ('' for the anonymous caller)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task_id = polled_task(scope)
        seen = header(scope, b"if-none-match") if task_id is not None else None
        if task_id is not None and seen is not None:
            try:
                record = await self.host.stored_record(task_id, self.principal(scope))
            except Exception as error:
                if not transient(error):
                    raise
                record = None  # the store is away: the status route answers, "store unavailable" if it still is
            if record is not None and matches(seen, etag(record)):
                await send({"type": "http.response.start", "status": 304, "headers": [(b"etag", etag(record).encode())]})
                await send({"type": "http.response.body", "body": b""})
                return
        await self.app(scope, receive, send)


def polled_task(scope: Scope) -> str | None:
    """The task id of `GET /tasks/{id}/status` with no query, as Starlette's route would read it."""
    if scope["type"] != "http" or scope["method"] != "GET" or scope.get("query_string"):
        return None
    path = route_path(scope)
    if not (path.startswith("/tasks/") and path.endswith("/status")):
        return None
    task_id = path[len("/tasks/") : -len("/status")]
    return task_id if task_id and "/" not in task_id else None


def etag(record: TaskRecord) -> str:
    return f'"{record.revision}"'


def matches(if_none_match: str | None, tag: str) -> bool:
    """Whether an If-None-Match header names this ETag: `*`, or one of its comma-separated tags, weak or strong."""
    if if_none_match is None:
        return False
    tags = {candidate.strip().removeprefix("W/") for candidate in if_none_match.split(",")}
    return "*" in tags or tag in tags
