"""The direct path for the hot JSON-RPC methods: a well-formed, non-streaming `SendMessage` or `GetTask` on an agent's
JSON-RPC path, answered without Starlette's routing and the SDK's dispatcher, but exactly as the dispatcher answers it
(status, headers, body, log lines); every other request goes on, unchanged, to the agent's routes.

The answer is the dispatcher's: `MessageToDict` of the result (as `proto_json.to_dict` writes it) in the envelope a
`JSONRPC20Response` writes (result, id, then jsonrpc; the id checked by `accepted_id`); an A2A error of the
handler through `build_error_response`; an error of the context builder (the `-32009` version check) or any other
exception through `BridgeJsonRpcDispatcher._generate_error_response`. A request the dispatcher would refuse (its
envelope, or params that do not parse) goes on before anything has run. The dispatcher's version check passes
whenever `BridgeContextBuilder.build` does, so it is not repeated. While the SDK records spans (`serve --trace`) or
logs at debug level, every request goes on, so that its spans and debug lines stay as they are."""

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.server.routes import jsonrpc_dispatcher
from a2a.types import GetTaskRequest, SendMessageRequest, SendMessageResponse, Task
from a2a.utils import telemetry
from a2a.utils.errors import A2AError, TaskNotFoundError
from google.protobuf.message import Message as ProtoMessage
from jsonrpc.jsonrpc2 import JSONRPC20Request
from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from a2a_bridge.core.auth import BridgeContextBuilder
from a2a_bridge.http.json_bodies import json_headers, render
from a2a_bridge.http.jsonrpc import BridgeJsonRpcDispatcher
from a2a_bridge.http.limits import PARSED_BODY
from a2a_bridge.store.item_texts import TEXTS, task_dict
from a2a_bridge.store.proto_json import from_dict, to_dict, to_plain_dict

sdk_log = logging.getLogger(jsonrpc_dispatcher.__name__)
"""The dispatcher's logger: the direct path logs what the dispatcher would, under its name."""
DEBUG_LOGS = (sdk_log, logging.getLogger(telemetry.__name__))
"""The loggers whose debug lines only the dispatcher writes."""

Call = Callable[[RequestHandler, Any, ServerCallContext], Awaitable[tuple[dict[str, Any], bool]]]
"""A method's result as JSON, and whether it is plain (`proto_json.to_plain_dict`: no float, no map)."""
TaskJson = Callable[[Task], dict[str, Any]]
"""A task's JSON as `to_dict` writes it (`StoredTasks.json` makes a finished task's once)."""
RequestId = str | int | None


async def send_message(
    handler: RequestHandler, params: SendMessageRequest, context: ServerCallContext
) -> tuple[dict[str, Any], bool]:
    """`SendMessage` as the dispatcher's `_handle_send_message` answers it. The dispatcher copies the result into a
    `SendMessageResponse`; the copy decides the order of a Struct's keys (metadata, data parts), so a result that
    holds one is copied as there, and any other is written as it is (the same JSON)."""
    result = await handler.on_message_send(params, context)
    field = "task" if isinstance(result, Task) else "message"
    written, plain = task_dict(result, TEXTS) if isinstance(result, Task) else to_plain_dict(result)
    if plain:
        return {field: written}, True
    return to_dict(SendMessageResponse(**{field: result})), False


def get_task(task_json: TaskJson) -> Call:
    """`GetTask` as the dispatcher's `_handle_get_task` answers it, the task's JSON written by `task_json`."""

    async def call(handler: RequestHandler, params: GetTaskRequest, context: ServerCallContext) -> tuple[dict[str, Any], bool]:
        task = await handler.on_get_task(params, context)
        if not task:
            raise TaskNotFoundError
        return task_json(task), False

    return call


def methods(task_json: TaskJson) -> dict[str, tuple[type[ProtoMessage], Call]]:
    """The methods the direct path answers: the params' type (as the dispatcher's `METHOD_TO_MODEL`) and the call."""
    return {"SendMessage": (SendMessageRequest, send_message), "GetTask": (GetTaskRequest, get_task(task_json))}


def steps_aside() -> bool:
    """Whether the SDK records spans of its dispatcher (chosen when the SDK is imported) or logs at debug level."""
    if telemetry.otel_installed and telemetry.otel_enabled:
        return True
    for log in DEBUG_LOGS:
        if log.isEnabledFor(logging.DEBUG):
            return True
    return False


def accepted_id(body: dict[str, Any]) -> tuple[bool, RequestId]:
    """Whether the dispatcher accepts the envelope as it stands (`jsonrpc` exactly "2.0", no members beside the four,
    params an object, an id that is absent, null, a string or an integer), and its id."""
    if not body.keys() <= JSONRPC20Request.POSSIBLE_FIELDS or body.get("jsonrpc") != "2.0":
        return False, None
    if not isinstance(body.get("params"), dict):
        return False, None
    rpc_id = body.get("id")
    if rpc_id is None or (isinstance(rpc_id, str | int) and not isinstance(rpc_id, bool)):
        return True, rpc_id
    return False, None


class DirectRpc:
    """ASGI, behind `RequestLimits` (whose parsed body it reads) and in front of the agent's routes: answers the hot
    JSON-RPC methods on `path` itself, as the module's docstring says, and hands every other request on."""

    def __init__(
        self,
        app: ASGIApp,
        handler: RequestHandler,
        builder: BridgeContextBuilder,
        dispatcher: BridgeJsonRpcDispatcher,
        path: str,
        task_json: TaskJson,
    ) -> None:
        self.app = app
        self.handler = handler
        self.builder = builder
        self.dispatcher = dispatcher
        self.path = path
        self.methods = methods(task_json)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        direct = self._direct(scope)
        if direct is None:
            await self.app(scope, receive, send)
            return
        request_id, method, params, call = direct
        answer = await self.answer(Request(scope, receive), request_id, method, params, call)
        if isinstance(answer, bytes):
            await send({"type": "http.response.start", "status": 200, "headers": json_headers(answer)})
            await send({"type": "http.response.body", "body": answer})
        else:
            await answer(scope, receive, send)

    def _direct(self, scope: Scope) -> tuple[RequestId, str, ProtoMessage, Call] | None:
        """The id, method, parsed params and call of a request the direct path answers; None for any other."""
        body = scope.get(PARSED_BODY)
        if not isinstance(body, dict):
            return None
        method = body.get("method")
        if not isinstance(method, str) or method not in self.methods:
            return None
        if scope["method"] != "POST" or get_route_path(scope) != self.path or steps_aside():
            return None
        return self.call_of(body, method)

    def call_of(self, body: dict[str, Any], method: str) -> tuple[RequestId, str, ProtoMessage, Call] | None:
        """For a POST to `path` of a body whose method is one of `methods`: its id, method, parsed params and call
        when the direct path answers it, else None."""
        accepted, request_id = accepted_id(body)
        if not accepted:
            return None
        params_type, call = self.methods[method]
        try:
            params = from_dict(body["params"], params_type())
        except Exception:  # the dispatcher's -32602, which it answers itself
            return None
        return request_id, method, params, call

    async def answer(
        self, request: Request, request_id: RequestId, method: str, params: ProtoMessage, call: Call
    ) -> bytes | JSONResponse:
        """What the dispatcher's `handle_requests` returns, from the call context on: the body of its 200 JSON answer
        (`json_headers` are that answer's headers), or the dispatcher's own response."""
        try:
            context = self.builder.build(request)
            context.tenant = getattr(params, "tenant", "")
            context.state["method"] = method
            context.state["request_id"] = request_id
            try:
                written, plain = await call(self.handler, params, context)
                result = {"result": written, "id": request_id, "jsonrpc": "2.0"}
            except A2AError as e:
                result, plain = build_error_response(request_id, e), False
            return render(result, plain)
        except A2AError as e:
            return self.dispatcher._generate_error_response(request_id, e)
        except Exception as e:  # as the dispatcher: logged, and a generic -32603
            sdk_log.exception("Unhandled exception")
            return self.dispatcher._generate_error_response(request_id, e)
