"""The `a2a-bridge` command."""

import argparse
import asyncio
import logging
import uuid
from datetime import timedelta
from pathlib import Path

import uvicorn

from a2a_bridge import planner
from a2a_bridge.app import Bridge
from a2a_bridge.auth import Principal
from a2a_bridge.clock import SystemClock
from a2a_bridge.store import StoreConfig, Stores
from a2a_bridge.task_host import HostSettings
from capture import recorder, replay

DEMO_OPERATOR_TOKEN = "ops_demo_5b9e"
KIT_PORTS = {"test-runner": 41241, "code-reviewer": 41242, "deployer": 41243, "conformance": 9999}
"""Each agent's own port under --kit-ports: the kit's three, and the TCK's default SUT port for conformance."""


def user_token(text: str) -> tuple[str, Principal]:
    """`TOKEN=NAME`: a bearer token and the user it names."""
    token, _, name = text.partition("=")
    if not token or not name:
        raise argparse.ArgumentTypeError("expected TOKEN=NAME")
    return token, Principal(name)


def parser() -> argparse.ArgumentParser:
    from agents.catalog import AGENT_NAMES

    root = argparse.ArgumentParser(prog="a2a-bridge", description="An A2A 1.0 server for the three sample agents.")
    commands = root.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve test-runner, code-reviewer and deployer")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--store", default="sqlite:///./a2a-bridge.db", help="memory, sqlite:///PATH or postgresql://...")
    serve.add_argument("--kit-ports", action="store_true", help="also serve each agent at the root of its kit port")
    serve.add_argument("--pace", type=float, default=0.25, help="seconds the sample agents wait between steps")
    serve.add_argument("--deploy-ledger", type=Path, help="file the deployer appends each rollout to")
    serve.add_argument("--lease", type=float, default=300.0, help="seconds of a claim's lease, renewed while a turn runs")
    serve.add_argument("--idle-lifespan", type=float, help="seconds an idle task waits for input before it is closed")
    serve.add_argument("--operator-token", default=DEMO_OPERATOR_TOKEN, help="bearer token of the operator principal")
    serve.add_argument(
        "--user-token", action="append", default=[], type=user_token, metavar="TOKEN=NAME",
        help="bearer token of a named user principal, recognised by every agent (repeatable)",
    )
    serve.add_argument(
        "--agent", action="append", dest="agents", choices=AGENT_NAMES, metavar="NAME",
        help=f"serve this agent (repeatable; one of {', '.join(AGENT_NAMES)}); default: the three sample agents",
    )
    serve.add_argument("--log-level", default="info")
    replay.register(commands)
    recorder.register(commands)
    planner.register(commands)
    return root


async def serve(args: argparse.Namespace) -> None:
    from agents.catalog import SAMPLE_AGENTS, served_agents

    settings = HostSettings(
        lease=timedelta(seconds=args.lease),
        idle_lifespan=timedelta(seconds=args.idle_lifespan) if args.idle_lifespan else None,
    )
    bridge = Bridge(
        served_agents(args.agents or SAMPLE_AGENTS, args.pace, deploy_ledger=args.deploy_ledger),
        Stores(StoreConfig.parse(args.store)),
        SystemClock(),
        lambda: str(uuid.uuid4()),
        settings,
        {**dict(args.user_token), args.operator_token: Principal("operator", kind="operator")},
    )
    configs = [uvicorn.Config(bridge.app(), host=args.host, port=args.port, log_level=args.log_level)]
    if args.kit_ports:
        configs += [
            uvicorn.Config(bridge.kit_app(name), host=args.host, port=port, log_level=args.log_level, lifespan="off")
            for name, port in KIT_PORTS.items()
            if name in bridge.agents
        ]
    await asyncio.gather(*(uvicorn.Server(config).serve() for config in configs))


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.command == "serve":
        asyncio.run(serve(args))
    elif hasattr(args, "run"):
        raise SystemExit(args.run(args))
