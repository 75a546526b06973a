"""The media types of the A2A bindings: a request body must be JSON (`application/json` or `application/a2a+json`,
both named by the specification), else ContentTypeNotSupportedError; a JSON answer, errors included, is labelled with
the type the request asked for: the JSON type its Accept header prefers, else its own Content-Type, else
`application/json`, the type the specification's binding sections (9.1, 11.1) name for responses."""

from collections.abc import Iterable
from typing import NamedTuple

from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.utils.error_handlers import build_rest_error_payload
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from a2a_bridge.core import errors
from a2a_bridge.core.auth import route_path
from a2a_bridge.http.binding_paths import under
from a2a_bridge.http.rest_errors import spec_status

A2A_JSON = "application/a2a+json"
PLAIN_JSON = "application/json"
JSON_TYPES = (A2A_JSON, PLAIN_JSON)
MAX_SHOWN = 100
"""How much of a refused Content-Type the error repeats."""


def essence(value: str) -> str:
    """A media type without its parameters, in lower case."""
    return value.split(";", 1)[0].strip().lower()


def quality(params: list[str]) -> float:
    """The q parameter of an Accept item (1 when absent, 0 when unreadable)."""
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                return float(value.strip())
            except ValueError:
                return 0.0
    return 1.0


def preferred(accept: str) -> str | None:
    """The JSON type an Accept header prefers (highest q, the first on a tie); None when it names neither."""
    best, best_q = None, 0.0
    for item in accept.split(","):
        kind, *params = item.split(";")
        q = quality(params)
        if essence(kind) in JSON_TYPES and q > best_q:
            best, best_q = essence(kind), q
    return best


class Heads(NamedTuple):
    """The request headers this module reads, each name's first value (as Starlette's `Headers` reads it)."""

    accept: str | None = None
    content_type: str | None = None
    content_length: str | None = None
    transfer_encoding: str | None = None


PLACES = {b"accept": 0, b"content-type": 1, b"content-length": 2, b"transfer-encoding": 3}
"""Each header `Heads` holds, by its place there."""


def heads(scope: Scope) -> Heads:
    """The headers `Heads` names, read in one pass."""
    found: list[str | None] = [None, None, None, None]
    for name, value in scope["headers"]:
        at = PLACES.get(name)
        if at is not None and found[at] is None:
            found[at] = value.decode("latin-1")
    return Heads(*found)


def answer_type(scope: Scope, read: Heads | None = None) -> str:
    """The type a JSON answer to this request is labelled with (`read`: its headers, when read already)."""
    read = read or heads(scope)
    asked = preferred(read.accept) if read.accept else None
    if asked is not None:
        return asked
    sent = essence(read.content_type or "")
    return sent if sent in JSON_TYPES else PLAIN_JSON


def has_body(read: Heads) -> bool:
    length = read.content_length
    return read.transfer_encoding is not None or (length is not None and length.strip() != "0")


def relabelled(headers: Iterable[tuple[bytes, bytes]], label: bytes) -> list[tuple[bytes, bytes]]:
    """Response headers with each JSON Content-Type labelled `label` (the same list when none differs)."""
    listed = headers if isinstance(headers, list) else list(headers)
    changed: list[tuple[bytes, bytes]] | None = None
    for index, (name, value) in enumerate(listed):
        if value != label and name.lower() == b"content-type" and essence(value.decode("latin-1")) in JSON_TYPES:
            changed = changed or list(listed)
            changed[index] = (name, label)
    return listed if changed is None else changed


class BindingMediaTypes:
    """Refuses a request body that is not JSON with ContentTypeNotSupportedError (415 on HTTP+JSON, -32005 on
    JSON-RPC) before anything reads it, and labels the JSON answers of both bindings with `answer_type`."""

    def __init__(self, app: ASGIApp, jsonrpc_path: str, rest_path: str) -> None:
        self.app = app
        self.jsonrpc_path = jsonrpc_path
        self.binding_paths = (jsonrpc_path, rest_path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not under(route_path(scope), self.binding_paths):
            await self.app(scope, receive, send)
            return
        read = heads(scope)
        label = answer_type(scope, read).encode()
        sent = read.content_type or ""
        if has_body(read) and essence(sent) not in JSON_TYPES:
            await self._refuse(scope, receive, send, sent)
            return

        async def relabel(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = relabelled(message.get("headers", []), label)
            await send(message)

        await self.app(scope, receive, relabel)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, sent: str) -> None:
        error = errors.content_type_not_supported(essence(sent)[:MAX_SHOWN] or "(none)")
        if route_path(scope) == self.jsonrpc_path:
            response = JSONResponse(build_error_response(None, error), media_type=answer_type(scope))
        else:
            body, status = spec_status(build_rest_error_payload(error), 400)
            response = JSONResponse(body, status_code=status, media_type=answer_type(scope))
        await response(scope, receive, send)
