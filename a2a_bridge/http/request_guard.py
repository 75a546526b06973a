"""What a request must be before anything reads it: addressed to a Host this server answers for (DNS rebinding), from
no other site when it writes (a cross-site form), and carrying at most one Authorization header (one principal)."""

import ipaddress
import json
import re
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from a2a_bridge.core.config import split_host

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
"""The names a server bound to loopback answers for by default, at any port."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
HOST_SYNTAX = re.compile(r"(?:([A-Za-z0-9](?:[A-Za-z0-9._-]{0,252}))|\[([0-9A-Fa-f:.]{2,45})\])(?::([0-9]{1,5}))?")
"""A Host header as the server takes it: a name (letters, digits, `.`, `-`, `_`) or a bracketed IPv6 address, and an
optional numeric port; nothing else (no `@`, `/`, second colon, zone or percent sign), so that a Host the guard let
through is safe to put in a URL."""


def is_loopback(bind: str) -> bool:
    """Whether a listening address (`--host`) is loopback only."""
    if bind.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind.strip("[]")).is_loopback
    except ValueError:
        return False


def well_formed_host(host: str) -> bool:
    """Whether a Host value is a name or a bracketed IPv6 address with an optional port from 1 to 65535."""
    match = HOST_SYNTAX.fullmatch(host)
    if match is None:
        return False
    address, port = match.group(2), match.group(3)
    if port is not None and not 0 < int(port) < 65536:
        return False
    if address is None:
        return True
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return False
    return True


def host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    """Whether a Host value (`name[:port]`) is one of the allowed hosts: a name alone allows any port, `name:port`
    that port only, `*` every host. Empty `allowed` allows every host."""
    if not allowed or "*" in allowed:
        return True
    host = host.lower()
    name, _ = split_host(host)
    return bool(name) and (host in allowed or name in allowed)


def origin_host(origin: str) -> str | None:
    """The `host[:port]` of an Origin header, None for `null` or anything that is not an http(s) origin."""
    scheme, sep, rest = origin.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest or "/" in rest:
        return None
    return rest.lower()


def refusal(status: int, reason: str, message: str) -> tuple[dict[str, object], bytes]:
    """The response start and body of a refusal, in the shape of the bridge's other errors."""
    body = json.dumps({"error": {"code": status, "status": reason, "message": message}}, indent=2).encode()
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
    }
    return start, body


class RequestGuard:
    """ASGI, in front of everything the server answers: refuses a Host that is not well formed or not allowed (421), a
    write whose Origin is another site (403), and more than one Authorization header (400)."""

    def __init__(self, app: ASGIApp, allowed_hosts: tuple[str, ...], public_url: str | None = None) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        """Host values answered (`host_allowed`); empty: every Host."""
        self.public_origin = urlsplit(public_url).netloc.lower() if public_url else None
        """The origin of the configured public URL, whose pages a proxy in front may serve under another Host."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = self.refused(scope) if scope["type"] == "http" else None
        if refused is None:
            await self.app(scope, receive, send)
            return
        start, body = refusal(*refused)
        await send(start)
        await send({"type": "http.response.body", "body": body})

    def refused(self, scope: Scope) -> tuple[int, str, str] | None:
        hosts: list[str] = []
        origins: list[str] = []
        authorizations = 0
        for key, value in scope["headers"]:
            if key == b"host":
                hosts.append(value.decode("latin-1"))
            elif key == b"origin":
                origins.append(value.decode("latin-1"))
            elif key == b"authorization":
                authorizations += 1
        if len(hosts) > 1 or (hosts and not well_formed_host(hosts[0])):
            return 421, "MISDIRECTED_REQUEST", "Send one Host header: a name or a bracketed IPv6 address, and a port"
        if self.allowed_hosts and (not hosts or not host_allowed(hosts[0], self.allowed_hosts)):
            return 421, "MISDIRECTED_REQUEST", "This server does not answer for that Host (see --allowed-host)"
        if scope["method"] not in SAFE_METHODS and origins and not self.same_site(origins, hosts):
            return 403, "PERMISSION_DENIED", "Requests from another site's pages are refused"
        if authorizations > 1:
            return 400, "INVALID_ARGUMENT", "Send one Authorization header"
        return None

    def same_site(self, origins: list[str], hosts: list[str]) -> bool:
        """Whether a browser's Origin names this server: the Host the request was sent to, or the public URL."""
        origin = origin_host(origins[0]) if len(origins) == 1 else None
        return origin is not None and (origin in (h.lower() for h in hosts) or origin == self.public_origin)
