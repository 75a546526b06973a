"""The `a2a-bridge` command."""

import argparse
import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import ipaddress
import os
import sys
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import uvicorn

from a2a_bridge import observability, operator_cli, planner, remote
from a2a_bridge.app import Bridge
from a2a_bridge.auth import RESERVED_NAMES, Principal
from a2a_bridge.clock import SystemClock
from a2a_bridge.config import ENV_OPERATOR_TOKEN, ConfigError, SecurityConfig, check_delegates, load, parse_network
from a2a_bridge.store import StoreConfig, Stores
from a2a_bridge.host_env import MAX_TASK_BYTES, HostSettings
from capture import recorder, replay

DEMO_OPERATOR_TOKEN = "ops_demo_5b9e"
KIT_PORTS = {"test-runner": 41241, "code-reviewer": 41242, "deployer": 41243, "conformance": 9999}
"""Each agent's own port under --kit-ports: the kit's three, and the TCK's default SUT port for conformance."""


def user_token(text: str) -> tuple[str, Principal]:
    """`TOKEN=NAME`: a bearer token and the user it names."""
    token, _, name = text.partition("=")
    if not token or not name:
        raise argparse.ArgumentTypeError("expected TOKEN=NAME")
    if name in RESERVED_NAMES:
        raise argparse.ArgumentTypeError(f"{name!r} is reserved for anonymous callers")
    return token, Principal(name)


def webhook_network(text: str) -> "ipaddress.IPv4Network | ipaddress.IPv6Network":
    try:
        return parse_network(text, "--allow-webhook-network")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def security(args: argparse.Namespace) -> SecurityConfig:
    """The security configuration: the file and the environment (a2a_bridge.config), then the command line; the
    demo operator token only while callers may be anonymous."""
    config = load(args.config, os.environ)
    if args.require_auth:
        config = replace(config, require_auth=True)
    operator = args.operator_token or os.environ.get(ENV_OPERATOR_TOKEN) or (
        None if config.require_auth else DEMO_OPERATOR_TOKEN
    )
    principals = {**config.principals, **dict(args.user_token)}
    if operator:
        principals[operator] = Principal("operator", kind="operator")
    config = replace(
        config, principals=principals, webhook_networks=(*config.webhook_networks, *args.allow_webhook_network)
    )
    check_delegates(config)
    return config


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
    serve.add_argument(
        "--max-task-bytes", type=int, default=MAX_TASK_BYTES,
        help="the most one task may hold (history, artifacts, metadata), in bytes; default %(default)s",
    )
    serve.add_argument(
        "--operator-token",
        help=f"bearer token of the operator principal (default ${ENV_OPERATOR_TOKEN}, else {DEMO_OPERATOR_TOKEN} unless"
        " --require-auth)",
    )
    serve.add_argument("--config", type=Path, metavar="FILE", help="security configuration (TOML; docs/security.md)")
    serve.add_argument(
        "--require-auth", action="store_true",
        help="every agent requires a configured bearer token (no anonymous callers)",
    )
    serve.add_argument(
        "--allow-webhook-network", action="append", default=[], type=webhook_network, metavar="CIDR",
        help="let webhooks reach this non-public network, e.g. 127.0.0.1/32 (repeatable)",
    )
    serve.add_argument(
        "--user-token", action="append", default=[], type=user_token, metavar="TOKEN=NAME",
        help="bearer token of a named user principal, recognised by every agent (repeatable)",
    )
    serve.add_argument(
        "--agent", action="append", dest="agents", choices=AGENT_NAMES, metavar="NAME",
        help=f"serve this agent (repeatable; one of {', '.join(AGENT_NAMES)}); default: the three sample agents",
    )
    serve.add_argument("--log-level", default="info")
    observability.register(serve)
    remote.add_options(serve)
    replay.register(commands)
    recorder.register(commands)
    planner.register(commands)
    operator_cli.register(commands)
    return root


async def serve(args: argparse.Namespace) -> None:
    from agents.catalog import SAMPLE_AGENTS, served_agents

    settings = HostSettings(
        lease=timedelta(seconds=args.lease),
        idle_lifespan=timedelta(seconds=args.idle_lifespan) if args.idle_lifespan else None,
        max_task_bytes=args.max_task_bytes,
    )
    remotes = remote.from_args(args)
    names = args.agents or ([] if remotes.agents else SAMPLE_AGENTS)
    local = served_agents(names, args.pace, deploy_ledger=args.deploy_ledger)
    bridge = Bridge(
        local + await remotes.specs([spec.name for spec in local]),
        Stores(StoreConfig.parse(args.store)),
        SystemClock(),
        lambda: str(uuid.uuid4()),
        settings,
        security=args.security,
    )
    app = observability.TaskPaths(bridge.app(), bridge.ledger) if args.log_json else bridge.app()
    settle_garbage_collector()
    settle_allocator()
    logs = observability.uvicorn_logging(args)
    configs = [uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, **logs)]
    if args.kit_ports:
        configs += [
            uvicorn.Config(bridge.kit_app(name), host=args.host, port=port, log_level=args.log_level, lifespan="off", **logs)
            for name, port in KIT_PORTS.items()
            if name in bridge.agents
        ]
    await asyncio.gather(*(uvicorn.Server(config).serve() for config in configs))


GC_THRESHOLDS = (10_000, 10, 10)
"""Allocations between young-generation collections (CPython's default is 700): a request allocates thousands of
short-lived objects, and collecting every 700 of them cost about a tenth of a trivial request's CPU."""


def settle_garbage_collector() -> None:
    """Move everything built at start-up (modules, cards, the app) out of the collector's scans, and collect young
    objects less often: the server's long-lived objects are never garbage, and its cycles are rare."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter: the size from which a block gets a mapping of its own."""
OWN_MAPPING_BYTES = 128 * 1024


def settle_allocator() -> None:
    """Give every block of 128 KiB or more a mapping of its own, returned to the system when freed (a no-op without
    glibc). glibc starts there, but raises the threshold to each large block it frees (up to 32 MiB), after which a
    large task's texts, JSON and rows came from heaps that kept the space once freed: 60 follow-ups of 1 MB left RSS
    2.3 times their bytes above its start, and 3.1 times once the task had ended."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(ctypes.util.find_library("c")).mallopt(M_MMAP_THRESHOLD, OWN_MAPPING_BYTES)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    observability.setup(args)
    if args.command == "serve":
        try:
            args.security = security(args)
        except ConfigError as e:
            print(f"a2a-bridge serve: {e}", file=sys.stderr)
            raise SystemExit(2) from e
        asyncio.run(serve(args))
    elif hasattr(args, "run"):
        raise SystemExit(args.run(args))
