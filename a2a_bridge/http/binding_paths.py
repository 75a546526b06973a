"""The A2A binding paths with or without a trailing slash: clients that join the card's URL with a `/` (the TCK's
JSON-RPC client among them) reach `/a2a/jsonrpc/` and `/a2a/rest/tasks/x/`, which are `/a2a/jsonrpc` and
`/a2a/rest/tasks/x`."""

from starlette.types import ASGIApp, Receive, Scope, Send

from a2a_bridge.core.auth import route_path


def under(path: str, prefixes: tuple[str, ...]) -> bool:
    """Whether a path is one of the prefixes or below one of them."""
    for prefix in prefixes:
        if path.startswith(prefix) and path[len(prefix):len(prefix) + 1] in ("", "/"):
            return True
    return False


class TrailingSlash:
    """Drops the trailing slashes of a request path below a binding prefix before any route or guard sees it."""

    def __init__(self, app: ASGIApp, binding_paths: tuple[str, ...]) -> None:
        self.app = app
        self.binding_paths = binding_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = route_path(scope)
            if path.endswith("/") and under(path.rstrip("/"), self.binding_paths):
                scope = {**scope, "path": str(scope["path"]).rstrip("/")}
                raw = scope.get("raw_path")
                if isinstance(raw, bytes):
                    scope["raw_path"] = raw.rstrip(b"/")
        await self.app(scope, receive, send)
