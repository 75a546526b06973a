"""HTTP+JSON error answers that never echo parser or exception text, with the status codes of the specification's
table: the one place that corrects what the SDK's REST error handler (`a2a.utils.error_handlers`) writes, as
`a2a_bridge.http.jsonrpc` does for JSON-RPC."""

import json
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from a2a_bridge.core.auth import route_path
from a2a_bridge.http import refusal_logs
from a2a_bridge.http.error_codes import SPEC_TABLE, STORE_UNAVAILABLE
from a2a_bridge.store.store_faults import MESSAGE as STORE_UNAVAILABLE_MESSAGE

INTERNAL = "Internal error"
INVALID_REQUEST = "Invalid request payload"
UNTRUSTED_REASON = "INVALID_REQUEST"
"""The ErrorInfo reason of the client errors whose message the SDK fills from a parser or an exception (a ParseError,
a body it failed to read)."""
MAX_ERROR_BODY = 65_536
"""Error bodies longer than this are replaced whole rather than read."""


def _reason(error: dict[str, Any]) -> str | None:
    details = error.get("details")
    if isinstance(details, list) and details and isinstance(details[0], dict):
        reason = details[0].get("reason")
        return reason if isinstance(reason, str) else None
    return None


def _names_task(error: dict[str, Any]) -> bool:
    """Whether the error is the bridge's own agent failure, which names the task and nothing else."""
    details = error.get("details")
    if not isinstance(details, list) or not details or not isinstance(details[0], dict):
        return False
    metadata = details[0].get("metadata")
    return isinstance(metadata, dict) and set(metadata) == {"taskId"}


def _store_unavailable(error: dict[str, Any]) -> bool:
    """Whether the error is the bridge's "store unavailable" (`store_faults.StoreUnavailable`), which carries no
    exception text."""
    return error.get("message") == STORE_UNAVAILABLE_MESSAGE


def cleaned(payload: Any, status: int) -> dict[str, Any]:
    """A REST error body with any message the SDK took from a parser or an exception replaced by a generic one."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        return {"error": {"code": status, "status": "INTERNAL" if status >= 500 else "INVALID_ARGUMENT",
                          "message": INTERNAL if status >= 500 else INVALID_REQUEST}}
    reason = _reason(error)
    trusted = (
        (reason == "INTERNAL_ERROR" and _names_task(error)) or reason == "INVALID_AGENT_RESPONSE"
        or _store_unavailable(error)
    )
    if status >= 500 and not trusted:
        return {"error": {"code": status, "status": "INTERNAL", "message": INTERNAL}}
    if reason is None or reason == UNTRUSTED_REASON:
        return {"error": {**error, "message": INVALID_REQUEST}}
    return payload


def spec_status(payload: dict[str, Any], status: int) -> tuple[dict[str, Any], int]:
    """The error body and HTTP status with the code and status of the specification's table for an A2A error's
    reason (409 for TaskNotCancelableError, 415 for ContentTypeNotSupportedError, ...) and 503 for "store
    unavailable"; others as they are."""
    error = payload["error"]
    codes = STORE_UNAVAILABLE if _store_unavailable(error) else SPEC_TABLE.get(_reason(error) or "")
    if codes is None:
        return payload, status
    return {"error": {**error, "code": codes.http, "status": codes.grpc_status}}, codes.http


class RestErrorText:
    """Rewrites the HTTP+JSON binding's error bodies (status 400 and up, JSON) through `cleaned` and `spec_status`;
    the SDK's log line of each refusal stays one line (`a2a_bridge.http.refusal_logs`)."""

    def __init__(self, app: ASGIApp, binding_path: str) -> None:
        self.app = app
        self.binding_path = binding_path
        refusal_logs.install()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or f"{self.binding_path}/" not in route_path(scope):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []
        size = 0

        async def clean(message: Message) -> None:
            nonlocal start, size
            if message["type"] == "http.response.start":
                headers = MutableHeaders(raw=list(message.get("headers", [])))
                if message["status"] >= 400 and "json" in headers.get("content-type", ""):
                    start = message
                    return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            size += len(message.get("body", b""))
            if size <= MAX_ERROR_BODY:
                chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            await self._send_cleaned(start, b"".join(chunks) if size <= MAX_ERROR_BODY else b"", send)

        await self.app(scope, receive, clean)

    @staticmethod
    async def _send_cleaned(start: Message, body: bytes, send: Send) -> None:
        status = int(start["status"])
        try:
            payload: Any = json.loads(body)
        except ValueError:
            payload = None
        body, status = spec_status(cleaned(payload, status), status)
        text = json.dumps(body).encode()
        headers = MutableHeaders(raw=list(start.get("headers", [])))
        headers["content-length"] = str(len(text))
        await send({**start, "status": status, "headers": headers.raw})
        await send({"type": "http.response.body", "body": text, "more_body": False})
