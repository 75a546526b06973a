"""The SDK's JSON-RPC dispatcher with errors that never echo parser or exception text."""

import contextvars
import logging
import re
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.jsonrpc_models import InternalError as JSONRPCInternalError
from a2a.server.jsonrpc_models import JSONParseError, JSONRPCError, MethodNotFoundError
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.utils.errors import A2AError, InternalError, InvalidParamsError, InvalidRequestError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from a2a_bridge.http import refusal_logs
from a2a_bridge.store.store_faults import StoreUnavailable

log = logging.getLogger(__name__)

GENERIC_MESSAGES: dict[type, str] = {
    JSONParseError: "Invalid JSON payload",
    InvalidParamsError: "Invalid parameters",
    InvalidRequestError: "Request payload validation error",
    InternalError: "Internal error",
}


RENAMED_IN_1_0 = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/list": "ListTasks",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    "tasks/pushNotificationConfig/set": "CreateTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigs",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfig",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
}
"""A2A 0.3's JSON-RPC method names and the 1.0 names of the same methods."""

SHOWN_METHOD = re.compile(r"[A-Za-z][A-Za-z0-9/_.-]{0,63}")
"""A method name an error may repeat: letters, digits and a few separators, at most 64 characters; any other name
the caller sent is not echoed."""

_method: contextvars.ContextVar[object] = contextvars.ContextVar("a2a_bridge_jsonrpc_method", default=None)


def method_not_found(method: object) -> MethodNotFoundError:
    """-32601 naming the method when it is safe to repeat, and the 1.0 name of a 0.3 method."""
    if isinstance(method, str) and method in RENAMED_IN_1_0:
        return MethodNotFoundError(
            message=f"Method not found: {method} is A2A 0.3's name; A2A 1.0 names it {RENAMED_IN_1_0[method]}"
        )
    if isinstance(method, str) and SHOWN_METHOD.fullmatch(method):
        listed = ", ".join(JsonRpcDispatcher.METHOD_TO_MODEL)
        return MethodNotFoundError(message=f"Method not found: {method}; A2A 1.0's methods are {listed}")
    return MethodNotFoundError()


def sanitized(error: Exception | JSONRPCError | A2AError) -> Exception | JSONRPCError | A2AError:
    """The same error with any parser or exception text replaced by the generic message of its kind ("store
    unavailable" carries none: it stays as it is)."""
    if isinstance(error, StoreUnavailable):
        return error
    if isinstance(error, JSONParseError):
        return JSONParseError(message=GENERIC_MESSAGES[JSONParseError])
    if isinstance(error, JSONRPCInternalError):
        return InternalError(GENERIC_MESSAGES[InternalError])
    if isinstance(error, A2AError) and isinstance(error.data, dict) and "parseError" in error.data:
        return type(error)(GENERIC_MESSAGES.get(type(error), "Invalid request"))
    if isinstance(error, InternalError) and not (isinstance(error.data, dict) and "taskId" in error.data):
        return InternalError(GENERIC_MESSAGES[InternalError])
    if not isinstance(error, A2AError | JSONRPCError):
        return InternalError(GENERIC_MESSAGES[InternalError])
    return error


class BridgeJsonRpcDispatcher(JsonRpcDispatcher):
    """Fixes SDK defects in one place: JSON-RPC errors that carried the parser's or an exception's text, `params` that
    are not an object read as empty params, and DeleteTaskPushNotificationConfig answering `null` where its result is
    google.protobuf.Empty, `{}` in JSON; and logs one line, without a traceback, for each request refused as the
    client's error (`a2a_bridge.http.refusal_logs`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        refusal_logs.install()

    async def handle_requests(self, request: Request) -> Response:
        """`params` that are present but not an object: an array (by-position params, which no A2A method takes) is
        -32602 once the method is known; anything else is not a structured value, so not a Request object (-32600)."""
        try:
            body = await request.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and "params" in body and not isinstance(body["params"], dict):
            given = body.get("id")
            request_id = given if isinstance(given, str | int) and not isinstance(given, bool) else None
            if not isinstance(body["params"], list):
                return self._generate_error_response(request_id, InvalidRequestError("params must be an object"))
            method = body.get("method")
            if isinstance(method, str) and method in self.METHOD_TO_MODEL:
                return self._generate_error_response(request_id, InvalidParamsError("params must be an object"))
        token = _method.set(body.get("method") if isinstance(body, dict) else None)
        try:
            return await super().handle_requests(request)
        finally:
            _method.reset(token)

    async def _process_non_streaming_request(
        self, request_obj: Any, context: ServerCallContext
    ) -> dict[str, Any] | None:
        result = await super()._process_non_streaming_request(request_obj, context)
        return {} if result is None and context.state.get("method") == "DeleteTaskPushNotificationConfig" else result

    def _generate_error_response(
        self, request_id: str | int | None, error: Exception | JSONRPCError | A2AError
    ) -> JSONResponse:
        if type(error) is MethodNotFoundError:
            error = method_not_found(_method.get())
        return super()._generate_error_response(request_id, sanitized(error))

    def _create_response(
        self, context: ServerCallContext, handler_result: AsyncGenerator[dict[str, Any]] | dict[str, Any]
    ) -> Response:
        """Streams too: an exception that is not an A2A error ends a stream with a generic -32603, not its text."""
        if isinstance(handler_result, AsyncGenerator):
            handler_result = _without_exception_text(handler_result, context.state.get("request_id"))
        return super()._create_response(context, handler_result)


async def _without_exception_text(
    stream: AsyncGenerator[dict[str, Any]], request_id: str | int | None
) -> AsyncGenerator[dict[str, Any]]:
    try:
        async for item in stream:
            yield item
    except A2AError:
        raise
    except Exception:
        log.exception("a JSON-RPC stream ended with an error")
        yield build_error_response(request_id, InternalError(GENERIC_MESSAGES[InternalError]))


def jsonrpc_routes(dispatcher: BridgeJsonRpcDispatcher, path: str) -> list[Route]:
    return [Route(path=path, endpoint=dispatcher.handle_requests, methods=["POST"])]
