"""`AgentMounts`: a request below `/{name}/` reaches that agent's app with one dictionary lookup, in the scope
Starlette's `Mount` would give it, instead of through Starlette's middleware and a regular expression per route;
every other request (the index, health, metrics, the console, lifespan) goes to the Starlette application."""

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import Receive, Scope, Send

from a2a_bridge.core.auth import route_path


class AgentMounts:
    """The agents' mounts by name in front of `app`, the Starlette application whose routes hold them too (and which
    answers what no agent's prefix names, such as `/{name}` without its slash, which it redirects)."""

    def __init__(self, app: Starlette, mounts: dict[str, Mount]) -> None:
        self.app = app
        self.mounts = mounts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = route_path(scope)
            slash = path.find("/", 1)
            mount = self.mounts.get(path[1:slash]) if slash > 0 and path[0] == "/" else None
            if mount is not None:
                await mount.app(self.mounted(scope, mount, path[:slash]), receive, send)
                return
        await self.app(scope, receive, send)

    def mounted(self, scope: Scope, mount: Mount, prefix: str) -> Scope:
        """The scope as Starlette's application, router and `mount` hand it to the agent's app; only the outer
        application's exception handlers are left out (the agent's own Starlette app sets its own before any of its
        routes reads them)."""
        root_path = scope.get("root_path", "")
        scope["app"] = self.app
        scope.setdefault("router", self.app.router)
        scope["path_params"] = dict(scope.get("path_params", {}))
        scope["app_root_path"] = scope.get("app_root_path", root_path)
        scope["root_path"] = root_path + prefix
        scope["endpoint"] = mount.app
        scope["route"] = mount
        return scope
