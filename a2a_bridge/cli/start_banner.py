"""What `serve` says once it has started: the version, each agent with its card URL and bindings (gRPC ports as bound,
those `--grpc-port 0` picked too), the console, the store and whether anonymous callers are served (the demo mode).
Logged once, after start-up, in the bridge's log format; it names no token but the demo's."""

from dataclasses import dataclass

from sqlalchemy.engine import make_url

from a2a_bridge.app import CARD_PATH, JSONRPC_PATH, REST_PATH, Bridge
from a2a_bridge.core.config import DEMO_OPERATOR_TOKEN
from a2a_bridge.store.stores import StoreConfig


@dataclass(frozen=True)
class Served:
    """Where `serve` listens: the base URL of its port (or the public URL), the gRPC host, each kit port's URL."""

    base: str
    grpc_host: str
    kit: dict[str, str]


def store_text(store: StoreConfig) -> str:
    """The store as a user reads it, a PostgreSQL password hidden."""
    path = store.sqlite_path()
    if store.url is None:
        return "memory (nothing is kept across a restart)"
    if path is not None:
        return f"SQLite file {path.resolve()}"
    return make_url(store.url).render_as_string(hide_password=True)


def banner(version: str, bridge: Bridge, served: Served, store: StoreConfig) -> str:
    """The lines, the first naming the version and the address."""
    security = bridge.security
    width = max((len(name) for name in bridge.agents), default=0) + 2
    lines = [f"a2a-bridge {version} serving {len(bridge.agents)} agent(s) on {served.base}"]
    for name, agent in bridge.agents.items():
        base = f"{served.base}/{name}"
        bindings = [f"JSON-RPC {base}{JSONRPC_PATH}", f"HTTP+JSON {base}{REST_PATH}"]
        if agent.interfaces.grpc_port is not None:
            host = f"[{served.grpc_host}]" if ":" in served.grpc_host else served.grpc_host
            bindings.append(f"gRPC {host}:{agent.interfaces.grpc_port}")
        if name in served.kit:
            bindings.append(f"kit port {served.kit[name]}")
        lines.append(f"  {name:<{width}}card {base}{CARD_PATH}")
        lines.append(f"  {'':<{width}}{', '.join(bindings)}")
    demo_operator = DEMO_OPERATOR_TOKEN in security.principals
    operator = f"operator token {DEMO_OPERATOR_TOKEN}, the demo's" if demo_operator else "the operator's token"
    lines.append(f"  console: {served.base}/console/ ({operator})")
    lines.append(f"  store: {store_text(store)}")
    if security.require_auth:
        lines.append("  callers: a configured bearer token on every agent (--require-auth)")
    else:
        lines.append(
            "  callers: anonymous demo mode: a caller without a token is served, and every such caller shares every task"
            " made without one (README, \"Anonymous mode\"; --require-auth ends it)"
        )
    return "\n".join(lines)
