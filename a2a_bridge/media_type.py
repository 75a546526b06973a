"""HTTP+JSON answers labelled application/a2a+json, errors included, as the specification says."""

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from a2a_bridge.auth import route_path

A2A_JSON = b"application/a2a+json"
PLAIN_JSON = b"application/json"


def is_plain_json(content_type: bytes) -> bool:
    return content_type.split(b";")[0].strip().lower() == PLAIN_JSON


class A2AJsonErrors:
    """Relabels the SDK's HTTP+JSON error responses, which it sends as application/json, with the A2A media type."""

    def __init__(self, app: ASGIApp, binding_path: str) -> None:
        self.app = app
        self.binding_path = binding_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or f"{self.binding_path}/" not in route_path(scope):
            await self.app(scope, receive, send)
            return

        async def relabel(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    (name, A2A_JSON if name.lower() == b"content-type" and is_plain_json(value) else value)
                    for name, value in message.get("headers", [])
                ]
            await send(message)

        await self.app(scope, receive, relabel)
