"""Who is calling: bearer tokens mapped to principals, the 401 gate in front of protected agents, and the call context."""

import json
from dataclasses import dataclass

from a2a.auth.user import UnauthenticatedUser, User
from a2a.server.context import ServerCallContext
from a2a.server.routes.common import DefaultServerCallContextBuilder
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from a2a_bridge import errors

VERSION_HEADER = "a2a-version"


@dataclass(frozen=True)
class Principal(User):
    """An authenticated caller named by configuration."""

    name: str
    kind: str = "user"

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.name


def is_operator(context: ServerCallContext) -> bool:
    return isinstance(context.user, Principal) and context.user.kind == "operator"


def owner_context(owner: str) -> ServerCallContext:
    """A call context that acts as the named owner of a task ('' is the anonymous owner)."""
    return ServerCallContext(user=Principal(owner) if owner else UnauthenticatedUser())


def bearer_token(headers: "dict[str, str] | object") -> str | None:
    value = headers.get("authorization", "")  # type: ignore[attr-defined]
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class BridgeContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's context builder, plus the caller's principal, the public base URL, and the exact version check."""

    def __init__(self, tokens: dict[str, Principal], base_path: str) -> None:
        self.tokens = tokens
        self.base_path = base_path

    def build(self, request: Request) -> ServerCallContext:
        version = request.headers.get(VERSION_HEADER) or request.query_params.get("A2A-Version")
        if version != errors.SUPPORTED_VERSION:
            raise errors.version_not_supported(version)
        context = super().build(request)
        context.state["headers"][VERSION_HEADER] = version
        context.state["base_url"] = public_base(request, self.base_path)
        return context

    def identity(self, request: Request) -> ServerCallContext:
        """The caller alone, for the bridge's own endpoints, which are not A2A methods and need no version header."""
        return ServerCallContext(user=self.build_user(request))

    def build_user(self, request: Request) -> User:
        token = bearer_token(request.headers)
        principal = self.tokens.get(token) if token else None
        return principal if principal is not None else UnauthenticatedUser()


def public_base(request: Request, base_path: str) -> str:
    """The agent's base URL as the client reached it."""
    host = request.headers.get("host") or f"{request.url.hostname}:{request.url.port}"
    return f"{request.url.scheme}://{host}{base_path}"


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
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            if bearer_token(headers) not in self.tokens:
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
