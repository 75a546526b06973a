"""Who is calling: bearer tokens mapped to principals, the 401 gate in front of protected agents, and the call context."""

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from a2a.auth.user import UnauthenticatedUser, User
from a2a.server.context import ServerCallContext
from a2a.extensions.common import HTTP_EXTENSION_HEADER, get_requested_extensions
from a2a.server.routes.common import DefaultServerCallContextBuilder
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from a2a_bridge.core import errors

VERSION_HEADER = "a2a-version"
EXTENSIONS_HEADER = HTTP_EXTENSION_HEADER.lower()
VERSION_QUERY = "A2A-Version"
BODILESS_METHODS = frozenset({"GET", "DELETE"})
"""The methods whose request parameters travel in the query (the spec's HTTP+JSON binding, 11.5), and so the only
ones that may name `A2A-Version` there (3.6.1): a browser's cross-site simple POST cannot set the header."""
KINDS = ("user", "agent", "operator")
RESERVED_NAMES = frozenset({"", "anonymous"})
"""Names no principal may take: the anonymous owner and the responsible user shown for anonymous tasks."""
RESPONSIBLE_USER = "responsible_user"
"""The call-context state key naming the person a new task is for, when an agent principal creates it for them."""


@dataclass(frozen=True)
class Principal(User):
    """An authenticated caller named by configuration: a user (a person), an agent (acting for the people it lists)
    or an operator."""

    name: str
    kind: str = "user"
    acts_for: frozenset[str] = field(default_factory=frozenset)

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.name


def is_operator(context: ServerCallContext) -> bool:
    return isinstance(context.user, Principal) and context.user.kind == "operator"


def caller_name(context: ServerCallContext) -> str:
    """The caller's principal name; '' for an anonymous caller."""
    return context.user.user_name if context.user.is_authenticated else ""


def may_see(owner: str, responsible_user: str, context: ServerCallContext) -> bool:
    """Whether the caller may see and use a task: its owner (the principal that created it, '' for the shared
    anonymous owner), or the person an agent created it for. Everyone else is told the task does not exist."""
    return visible_to(caller_name(context), owner, responsible_user)


def visible_to(name: str, owner: str, responsible_user: str) -> bool:
    """`may_see` for a caller known by principal name ('' for the anonymous caller)."""
    return name == owner or (owner != "" and name != "" and name == responsible_user)


def owner_context(owner: str) -> ServerCallContext:
    """A call context that acts as the named owner of a task ('' is the anonymous owner)."""
    return ServerCallContext(user=Principal(owner) if owner else UnauthenticatedUser())


@functools.lru_cache(maxsize=1024)
def store_context(owner: str) -> ServerCallContext:
    """The owner's call context for the task stores alone, which only read whose task it is: one per owner, shared by
    every write (never handed to an agent or a handler, which may change a context's state)."""
    return owner_context(owner)


def bearer_token(scope: Scope) -> str | None:
    """The bearer token of a request's Authorization header: the one place that reads it. `request_guard` refuses a
    request that carries more than one, so every reader sees the same principal."""
    return bearer_of(header(scope, b"authorization") or "")


def bearer_of(value: str) -> str | None:
    """The token of one Authorization value when it is a bearer token (the gRPC binding reads its metadata with it)."""
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class BridgeContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's context builder, plus the caller's principal, the public base URL, and the exact version check."""

    def __init__(self, tokens: dict[str, Principal], base_path: str, public_url: str | None = None) -> None:
        self.tokens = tokens
        self.base_path = base_path
        self.public_url = public_url
        """The configured address the server is reached at (`--public-url`), else None."""

    def build(self, request: Request) -> ServerCallContext:
        """The SDK's context (`DefaultServerCallContextBuilder.build`: state `headers`, each name's first value, and
        `auth` where the scope has it; the caller, by `bearer_token`; the extensions `A2A-Extensions` names), the headers
        read from the scope in one pass, once the version is checked; with the base URL in state `base_url`."""
        scope = request.scope
        headers: dict[str, str] = {}
        extensions: list[str] = []
        for name, value in scope["headers"]:
            key, text = name.decode("latin-1"), value.decode("latin-1")
            headers.setdefault(key, text)
            if key == EXTENSIONS_HEADER:
                extensions.append(text)
        version = headers.get(VERSION_HEADER)
        if version is None and request.method in BODILESS_METHODS:
            version = request.query_params.get(VERSION_QUERY)
        if version != errors.SUPPORTED_VERSION:
            raise errors.version_not_supported(version)
        state: dict[str, Any] = {"auth": request.auth} if "auth" in scope else {}
        state["headers"] = headers
        headers[VERSION_HEADER] = version
        state["base_url"] = self.base_url(request, headers.get("host"))
        return ServerCallContext(
            user=self.build_user(request),
            state=state,
            requested_extensions=get_requested_extensions(extensions) if extensions else set(),
        )

    def base_url(self, request: Request, host: str | None = None) -> str:
        """The agent's base URL for links in messages: under the public URL when one is configured (`host`, the
        request's Host where the caller read it already)."""
        if self.public_url:
            return f"{self.public_url}{self.base_path}"
        return public_base(request, self.base_path, host or request.headers.get("host"))

    def identity(self, request: Request) -> ServerCallContext:
        """The caller alone, for the bridge's own endpoints, which are not A2A methods and need no version header."""
        return ServerCallContext(user=self.build_user(request))

    def build_user(self, request: Request) -> User:
        token = bearer_token(request.scope)
        principal = self.tokens.get(token) if token else None
        return principal if principal is not None else UnauthenticatedUser()


def own_base(scope: Scope, base_path: str) -> str:
    """The agent's base URL at the address the server listens on, whatever Host the caller sent."""
    host, port = scope.get("server") or ("localhost", None)
    name = f"[{host}]" if ":" in host else host
    return f"{scope.get('scheme', 'http')}://{name}{f':{port}' if port else ''}{base_path}"


def public_base(request: Request, base_path: str, host: str | None) -> str:
    """The agent's base URL as the client reached it (its Host, which `request_guard` checked)."""
    if not host:
        return f"{request.url.scheme}://{request.url.hostname}:{request.url.port}{base_path}"
    return f"{request.scope.get('scheme', 'http')}://{host}{base_path}"


def header(scope: Scope, name: bytes) -> str | None:
    """A request header's value by its lower-case name (the first one, as Starlette's `Headers` reads it), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def route_path(scope: Scope) -> str:
    """The request path below the mount point: Starlette's Mount keeps the full path in scope["path"]."""
    return str(scope["path"]).removeprefix(scope.get("root_path", ""))


class BearerGate:
    """Refuses protected paths without a known bearer token, before any A2A method runs."""

    def __init__(self, app: ASGIApp, realm: str, tokens: dict[str, Principal], protected: tuple[str, ...]) -> None:
        self.app = app
        self.realm = realm
        self.tokens = tokens
        self.protected = protected

    def guards(self, path: str) -> bool:
        """A protected path, at the agent's root or behind a tenant segment (the SDK's REST /{tenant} mount)."""
        _, _, after_tenant = path.lstrip("/").partition("/")
        return path.startswith(self.protected) or f"/{after_tenant}".startswith(self.protected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.guards(route_path(scope)):
            if bearer_token(scope) not in self.tokens:
                await unauthorized(self.realm)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def unauthorized(realm: str) -> Response:
    body = {"error": {"code": 401, "status": "UNAUTHENTICATED", "message": "Send Authorization: Bearer <token>"}}
    return Response(
        json.dumps(body, indent=2),
        status_code=401,
        media_type="application/json",
        headers={"WWW-Authenticate": f'Bearer realm="{realm}"'},
    )
