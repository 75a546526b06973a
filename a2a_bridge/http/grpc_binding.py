"""The gRPC binding: each agent on a port of its own, served by the SDK's `GrpcHandler` over the same
`BridgeRequestHandler` as the JSON bindings, with the same callers (bearer tokens in the `authorization` metadata,
UNAUTHENTICATED where the agent needs one), `A2A-Version` check, required extensions, limits (message size, what the
stores can hold as `a2a_bridge.store.storable` checks it for JSON bodies; per principal the streams open, the tasks
started a minute and the bytes stored, as `limits.StreamSlots` counts them for every binding) and the gRPC status
codes of the specification's table."""

import logging
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import grpc.aio
from a2a.auth.user import UnauthenticatedUser
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.grpc_handler import GrpcHandler, GrpcServerCallContextBuilder
from a2a.types import SendMessageRequest, a2a_pb2_grpc
from a2a.utils.errors import A2A_ERROR_REASONS, A2AError, InternalError, InvalidParamsError
from a2a.utils.grpc_status import status_to_grpc
from a2a.utils.proto_utils import validation_errors_to_bad_request
from google.protobuf import any_pb2, message
from google.protobuf.json_format import Error as JsonFormatError
from google.protobuf.json_format import MessageToDict
from google.rpc import error_details_pb2, status_pb2

from a2a_bridge.core import errors
from a2a_bridge.core.auth import VERSION_HEADER, Principal, bearer_of
from a2a_bridge.core.config import Limits
from a2a_bridge.http.error_codes import codes_for
from a2a_bridge.http.extensions import check_required
from a2a_bridge.http.jsonrpc import GENERIC_MESSAGES, sanitized
from a2a_bridge.http.limits import StreamSlots
from a2a_bridge.store.storable import NOT_FINITE, first_flaw

log = logging.getLogger(__name__)

T = TypeVar("T")
GENERIC_CODES: dict[str, grpc.StatusCode] = {
    "INVALID_PARAMS": grpc.StatusCode.INVALID_ARGUMENT,
    "INVALID_REQUEST": grpc.StatusCode.INVALID_ARGUMENT,
    "METHOD_NOT_FOUND": grpc.StatusCode.UNIMPLEMENTED,
    "INTERNAL_ERROR": grpc.StatusCode.INTERNAL,
}
"""The JSON-RPC errors that are not A2A-specific, by reason, as gRPC statuses."""
DOMAIN = "a2a-protocol.org"
UNAUTHENTICATED = "Send authorization: Bearer <token>"
ONE_PRINCIPAL = "Send one authorization entry"


def metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    """The call's metadata by lower-case key (the first value of each), binary entries left out."""
    found: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            found.setdefault(key.lower(), value)
    return found


def authorizations(context: grpc.aio.ServicerContext) -> int:
    """How many authorization entries the call's metadata carries: one principal per call, as on HTTP."""
    return sum(1 for key, _ in context.invocation_metadata() or () if key.lower() == "authorization")


def status_code(error: A2AError) -> grpc.StatusCode:
    codes = codes_for(error)
    if codes is not None:
        return grpc.StatusCode[codes.grpc_status]
    return GENERIC_CODES.get(A2A_ERROR_REASONS.get(type(error), ""), grpc.StatusCode.INTERNAL)


def rich_status(error: A2AError) -> status_pb2.Status:
    """google.rpc.Status with the error's ErrorInfo (its data as metadata) and, for invalid params, BadRequest."""
    data = error.data if isinstance(error.data, dict) else {}
    info = error_details_pb2.ErrorInfo(
        reason=A2A_ERROR_REASONS.get(type(error), "UNKNOWN_ERROR"),
        domain=DOMAIN,
        metadata={str(k): str(v) for k, v in data.items() if isinstance(v, str | int | float | bool)},
    )
    status = status_pb2.Status(code=status_code(error).value[0], message=str(getattr(error, "message", "")))
    detail = any_pb2.Any()
    detail.Pack(info)
    status.details.append(detail)
    if isinstance(error, InvalidParamsError) and data.get("errors"):
        bad_request = any_pb2.Any()
        bad_request.Pack(validation_errors_to_bad_request(data["errors"]))
        status.details.append(bad_request)
    return status


class BridgeGrpcContextBuilder(GrpcServerCallContextBuilder):
    """The caller from `authorization`, the exact `a2a-version` check, the required extensions, and the agent's HTTP
    base URL (links the agents write into tasks point there)."""

    def __init__(self, tokens: dict[str, Principal], http_base: str, required: frozenset[str]) -> None:
        self.tokens = tokens
        self.http_base = http_base
        self.required = required

    def principal(self, context: grpc.aio.ServicerContext) -> Principal | None:
        token = bearer_of(metadata(context).get("authorization", ""))
        return self.tokens.get(token) if token else None

    def build(self, context: grpc.aio.ServicerContext) -> ServerCallContext:
        headers = metadata(context)
        version = headers.get(VERSION_HEADER)
        if version != errors.SUPPORTED_VERSION:
            raise errors.version_not_supported(version)
        extensions = {e.strip() for e in headers.get("a2a-extensions", "").split(",") if e.strip()}
        call = ServerCallContext(
            user=self.principal(context) or UnauthenticatedUser(),
            state={"grpc_context": context, "headers": headers, "base_url": self.http_base},
            requested_extensions=extensions,
        )
        check_required(self.required, call)
        return call


class BridgeGrpcHandler(GrpcHandler):
    """The SDK's servicer with the bridge's gate in front of every call and its error statuses."""

    def __init__(
        self,
        request_handler: Any,
        builder: BridgeGrpcContextBuilder,
        needs_token: bool,
        slots: StreamSlots,
        limits: Limits,
    ) -> None:
        super().__init__(request_handler, builder)
        self.builder = builder
        self.needs_token = needs_token
        self.slots = slots
        self.limits = limits

    def who(self, context: grpc.aio.ServicerContext) -> str:
        """The principal of a call ('' for the anonymous principal), as `ServedAgent.principal_name` names it."""
        principal = self.builder.principal(context)
        return principal.name if principal is not None else ""

    async def exhausted(self, context: grpc.aio.ServicerContext, message: str, limit: str) -> None:
        """RESOURCE_EXHAUSTED naming the limit and its value, as HTTP's 429 does."""
        maximum = getattr(self.limits, limit)
        log.warning("refused a gRPC call past %s (%s)", limit, maximum)
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{message} ({limit} = {maximum})")

    async def _admit(self, request: message.Message, context: grpc.aio.ServicerContext) -> None:
        """UNAUTHENTICATED without a known token where the agent needs one; INVALID_ARGUMENT naming the first value
        the stores cannot hold (U+0000, a number that is not finite, nesting past the limit); RESOURCE_EXHAUSTED for a
        message past its principal's `max_stored_bytes` or `max_tasks_per_minute`."""
        if authorizations(context) > 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, ONE_PRINCIPAL)
        if self.needs_token and self.builder.principal(context) is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED)
        try:
            flaw = first_flaw(MessageToDict(request))
        except (ValueError, JsonFormatError):
            raise errors.invalid_field("", NOT_FINITE) from None
        if flaw is not None:
            raise errors.invalid_field(flaw.path, flaw.reason)
        if isinstance(request, SendMessageRequest):
            starts = not request.message.task_id
            over = await self.slots.admit(self.who(context), starts, request.ByteSize(), self.limits)
            if over is not None:
                await self.exhausted(context, *over)

    async def _handle_unary(
        self,
        request: message.Message,
        context: grpc.aio.ServicerContext,
        handler_func: Callable[[ServerCallContext], Awaitable[T]],
        default_response: T,
    ) -> T:
        try:
            await self._admit(request, context)
            return await handler_func(self._build_call_context(context, request))
        except A2AError as e:
            await self.abort_context(e, context)
        except Exception as e:
            await self._internal(e, context)
        return default_response

    async def _handle_stream(
        self,
        request: message.Message,
        context: grpc.aio.ServicerContext,
        handler_func: Callable[[ServerCallContext], AsyncIterable[T]],
    ) -> AsyncIterable[T]:
        try:
            await self._admit(request, context)
            who = self.who(context)
            if not self.slots.take(who):
                await self.exhausted(context, "Too many open streams", "max_streams")
            try:
                async for item in handler_func(self._build_call_context(context, request)):
                    yield item
            finally:
                self.slots.give(who)
        except A2AError as e:
            await self.abort_context(e, context)
        except Exception as e:
            await self._internal(e, context)

    async def _internal(self, error: Exception, context: grpc.aio.ServicerContext) -> None:
        """A gRPC abort goes on; anything else is logged and answered INTERNAL without its text."""
        if isinstance(error, grpc.aio.AbortError):
            raise error
        log.exception("a gRPC call ended with an error")
        await context.abort(grpc.StatusCode.INTERNAL, GENERIC_MESSAGES[InternalError])

    async def abort_context(self, error: A2AError, context: grpc.aio.ServicerContext) -> None:
        """The error as a rich gRPC status: the specification's code, ErrorInfo, never parser or exception text."""
        cleaned = sanitized(error)
        known = cleaned if isinstance(cleaned, A2AError) else InternalError(GENERIC_MESSAGES[InternalError])
        status = rich_status(known)
        rich = status_to_grpc(status)
        context.set_trailing_metadata(tuple(rich.trailing_metadata))
        await context.abort(rich.code, rich.details)


@dataclass
class GrpcAgent:
    """What one agent's gRPC server needs: its handler, callers and limits."""

    name: str
    handler: Any
    builder: BridgeGrpcContextBuilder
    needs_token: bool


access = logging.getLogger("a2a_bridge.grpc.access")
"""One line a gRPC call, at info (as uvicorn's access lines): caller, method, status."""


class AccessLog(grpc.aio.ServerInterceptor):
    """The gRPC counterpart of uvicorn's access line: `127.0.0.1:50312 - "gRPC /a2a.v1.A2AService/SendMessage" OK`,
    logged when the call ends (a stream when it closes), with the status it ended with."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or not access.isEnabledFor(logging.INFO):
            return handler
        method = details.method  # type: ignore[attr-defined]
        if handler.unary_unary is not None:
            call = handler.unary_unary

            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                ended, client = "UNKNOWN", caller_address(context)
                try:
                    answer = await call(request, context)
                    ended = status_name(context)
                    return answer
                except grpc.aio.AbortError:
                    ended = status_name(context)
                    raise
                finally:
                    access.info('%s - "gRPC %s" %s', client, method, ended)

            return grpc.unary_unary_rpc_method_handler(
                unary, handler.request_deserializer, handler.response_serializer
            )
        if handler.unary_stream is not None:
            stream = handler.unary_stream

            async def streamed(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterable[Any]:
                ended, client = "UNKNOWN", caller_address(context)
                try:
                    async for item in stream(request, context):
                        yield item
                    ended = status_name(context)
                except grpc.aio.AbortError:
                    ended = status_name(context)
                    raise
                finally:
                    access.info('%s - "gRPC %s" %s', client, method, ended)

            return grpc.unary_stream_rpc_method_handler(
                streamed, handler.request_deserializer, handler.response_serializer
            )
        return handler


def status_name(context: grpc.aio.ServicerContext) -> str:
    """The status a call ends with: the code the servicer set or aborted with, else OK."""
    code = context.code()
    if code is None:
        return "OK"
    return code.name if isinstance(code, grpc.StatusCode) else str(code)


def caller_address(context: grpc.aio.ServicerContext) -> str:
    """The caller's address as an access line shows it, read when the call starts: once a call has ended (a client
    that went away), gRPC's `peer()` reads a freed call and crashes the process (seen under the TCK)."""
    peer = context.peer() or ""
    return peer.split(":", 1)[1] if peer.startswith(("ipv4:", "ipv6:")) else peer


class GrpcServers:
    """One grpc.aio server per agent, on `host`, at `first_port` and the ports after it (0: any free port each)."""

    def __init__(self, host: str, first_port: int, limits: Limits, slots: StreamSlots) -> None:
        self.host = host
        self.first_port = first_port
        self.limits = limits
        self.slots = slots
        self.servers: list[grpc.aio.Server] = []

    async def start(self, agents: list[GrpcAgent]) -> dict[str, int]:
        """Starts a server for each agent; the port each listens on, by agent name."""
        ports: dict[str, int] = {}
        options = [
            ("grpc.max_receive_message_length", self.limits.max_body_bytes),
            ("grpc.so_reuseport", 0),
        ]
        for index, agent in enumerate(agents):
            server = grpc.aio.server(options=options, interceptors=[AccessLog()])
            servicer = BridgeGrpcHandler(agent.handler, agent.builder, agent.needs_token, self.slots, self.limits)
            a2a_pb2_grpc.add_A2AServiceServicer_to_server(servicer, server)
            wanted = self.first_port + index if self.first_port else 0
            ports[agent.name] = server.add_insecure_port(f"{self.host}:{wanted}")
            await server.start()
            self.servers.append(server)
        return ports

    async def stop(self) -> None:
        for server in self.servers:
            await server.stop(grace=1.0)
        self.servers.clear()
