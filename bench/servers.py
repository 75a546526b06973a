"""The Python servers `make bench` compares a2a-bridge with, each an ASGI app factory for uvicorn.

- `stock_app`: the stock a2a-sdk server (its DefaultRequestHandler, InMemoryTaskStore and JSON-RPC routes, composed
  as its documentation does) running agents/bench.py's trivial agent, tracing off;
- `echo_app`: a bare Starlette JSON echo at the same path, the limit of a Python server on this machine.

Run one with `python -m uvicorn --factory bench.servers:stock_app` (or `echo_app`).
"""

import os

os.environ.setdefault("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false")

from a2a.server.request_handlers import DefaultRequestHandler  # noqa: E402 - tracing is chosen before a2a loads
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes  # noqa: E402
from a2a.server.tasks import InMemoryTaskStore  # noqa: E402
from a2a.types import AgentInterface  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from a2a_bridge.agents import bench  # noqa: E402

JSONRPC_PATH = "/a2a/jsonrpc"


def stock_app() -> Starlette:
    card = bench.card()
    card.supported_interfaces.append(
        AgentInterface(url=f"http://127.0.0.1{JSONRPC_PATH}", protocol_binding="JSONRPC", protocol_version="1.0")
    )
    handler = DefaultRequestHandler(bench.Bench(), InMemoryTaskStore(), card)
    return Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, JSONRPC_PATH))


def echo_app() -> Starlette:
    async def echo(request: Request) -> Response:
        return JSONResponse(await request.json())

    return Starlette(routes=[Route(JSONRPC_PATH, echo, methods=["POST"])])
