"""The `a2a-bridge` command."""

import argparse
import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import importlib.metadata
import ipaddress
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import uvicorn
from starlette.types import ASGIApp
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from a2a_bridge.agent import Agent
from a2a_bridge.agents.catalog import AGENT_NAMES, DOCUMENTED_AGENTS, SAMPLE_AGENTS, served_agents
from a2a_bridge.app import Bridge, GrpcSettings
from a2a_bridge.capture import planner
from a2a_bridge.capture import recorder, replay_command
from a2a_bridge.capture.kit import KIT_PORTS
from a2a_bridge.cli.agent_loading import AgentLoadError, is_reference, load_agent
from a2a_bridge.cli.preflight import CannotStart, check_port, check_store
from a2a_bridge.cli.start_banner import Served, banner
from a2a_bridge.core import observability
from a2a_bridge.core.arg_types import LOG_LEVELS, CommandParser, port, positive_seconds, seconds_or_zero, writable_file
from a2a_bridge.core.auth import Principal
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.core.config import (
    DEMO_OPERATOR_TOKEN,
    ENV_OPERATOR_TOKEN,
    ConfigError,
    SecurityConfig,
    check_delegates,
    check_demo_tokens,
    check_names,
    limits_from,
    load,
    merged,
    parse_host,
    parse_network,
    parse_public_url,
    user_entry,
)
from a2a_bridge.core.ids import ordered_id
from a2a_bridge.http.read_timeouts import timed
from a2a_bridge.http.request_guard import LOOPBACK_HOSTS, is_loopback
from a2a_bridge.http.shutdown import BoundedServer, Draining
from a2a_bridge.http.task_paths import TaskPaths
from a2a_bridge.ops import operator_cli
from a2a_bridge.push.attempts import RetrySchedule
from a2a_bridge.remote import config as remote_config
from a2a_bridge.store.stores import StoreConfig, Stores
from a2a_bridge.tasks.host_env import HostSettings


log = logging.getLogger("a2a_bridge.serve")


def user_token(text: str) -> tuple[str, Principal]:
    """`TOKEN=NAME`: a bearer token and the user it names, checked as the file and the environment check names."""
    try:
        return user_entry(text, "--user-token")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def limit_setting(text: str) -> tuple[str, str]:
    """`NAME=N`: a limit of docs/security.md and its value, checked with the file's and environment's."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError("expected NAME=N")
    return name.strip(), value.strip()


def store_setting(text: str) -> StoreConfig:
    """`--store`: memory, sqlite:///PATH or postgresql://..."""
    try:
        return StoreConfig.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def webhook_network(text: str) -> "ipaddress.IPv4Network | ipaddress.IPv6Network":
    try:
        return parse_network(text, "--allow-webhook-network")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def allowed_host(text: str) -> str:
    try:
        return parse_host(text, "--allowed-host")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def public_url(text: str) -> str:
    try:
        return parse_public_url(text, "--public-url")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def security(args: argparse.Namespace) -> SecurityConfig:
    """The security configuration: the file and the environment (a2a_bridge.core.config), then the command line. The demo
    operator token only while no principal is configured and callers may be anonymous; the hosts answered, by
    default the loopback names when the server listens on loopback, and always the public URL's host."""
    config = load(args.config, os.environ)
    if args.require_auth:
        config = replace(config, require_auth=True)
    principals = merged(config.principals, args.user_token, "--user-token")
    demo = not principals and not config.require_auth
    operator = args.operator_token or os.environ.get(ENV_OPERATOR_TOKEN) or (DEMO_OPERATOR_TOKEN if demo else None)
    if operator:
        principals = merged(principals, [(operator, Principal("operator", kind="operator"))], "the operator token")
    chosen_url = args.public_url or config.public_url
    hosts = (*config.allowed_hosts, *args.allowed_host)
    if not hosts and is_loopback(args.host):
        hosts = LOOPBACK_HOSTS
    if hosts and chosen_url:
        hosts = (*hosts, urlsplit(chosen_url).netloc.lower())
    config = replace(
        config,
        principals=principals,
        webhook_networks=(*config.webhook_networks, *args.allow_webhook_network),
        limits=limits_from(dict(args.limit), config.limits, "--limit"),
        allowed_hosts=hosts,
        public_url=chosen_url,
    )
    check_names(config)
    check_delegates(config)
    return config


def chosen_agents(args: argparse.Namespace, remotes: bool) -> list[Agent]:
    """The agents `--agent` names, in the order named (built-in ones each once), the user's loaded from their
    modules; by default the three sample agents, or none beside remote agents."""
    choices = list(dict.fromkeys(args.agents or ([] if remotes else SAMPLE_AGENTS)))
    unknown = [c for c in choices if not is_reference(c) and c not in AGENT_NAMES]
    if unknown:
        raise AgentLoadError(
            f"--agent {unknown[0]}: expected one of {', '.join(DOCUMENTED_AGENTS)}, or MODULE:ATTRIBUTE naming your agent"
        )
    builtin = served_agents([c for c in choices if not is_reference(c)], args.pace, deploy_ledger=args.deploy_ledger)
    by_name = {spec.name: spec for spec in builtin}
    agents = [load_agent(c) if is_reference(c) else by_name[c] for c in choices]
    names = [agent.name for agent in agents]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise AgentLoadError(f"--agent: two agents are named {', '.join(twice)}; each agent needs a name of its own")
    return agents


def grpc_port(number: int, http_ports: set[int]) -> int:
    """One agent's gRPC port, counted from --grpc-port: within the ports there are, and none the HTTP servers take."""
    if number > 65535:
        raise CannotStart(f"--grpc-port: one port per agent from it on passes 65535 ({number})")
    if number in http_ports:
        raise CannotStart(f"--grpc-port: one port per agent from it on takes {number}, an HTTP port")
    return number


def http_url(bind: str, port: int) -> str:
    """The address `serve` listens at, as a URL."""
    return f"http://[{bind}]:{port}" if ":" in bind and not bind.startswith("[") else f"http://{bind}:{port}"


def kit_url(bind: str, port: int) -> str:
    """The address of a kit port's agent, as cards name it: the kit's own `localhost:PORT` on loopback."""
    if is_loopback(bind):
        return f"http://localhost:{port}"
    return http_url(bind, port)


DISTRIBUTION = "a2a-bridge"


def installed_version() -> str:
    """The version of the installed distribution (`pip install`, editable or not), as importlib.metadata reads it."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: pip install .)"


def parser() -> argparse.ArgumentParser:
    root = CommandParser(prog="a2a-bridge", description="An A2A 1.0 server for your agents and the three sample agents.")
    root.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    commands = root.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    serve = commands.add_parser("serve", help="serve your agents, or test-runner, code-reviewer and deployer")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (0.0.0.0 or :: for every interface)")
    serve.add_argument("--port", type=port, default=8000, help="the HTTP port, for every agent under /{agent}/")
    serve.add_argument(
        "--store", type=store_setting, default="sqlite:///./a2a-bridge.db", help="memory, sqlite:///PATH or postgresql://..."
    )
    serve.add_argument(
        "--kit-ports", action="store_true",
        help=f"also serve each agent at the root of its kit port ({', '.join(f'{n} {p}' for n, p in KIT_PORTS.items())})",
    )
    serve.add_argument(
        "--grpc-port", type=port, metavar="PORT",
        help="also serve every agent on gRPC, one port each from PORT on in the order served (0: any free port each);"
        " the cards list them",
    )
    serve.add_argument(
        "--pace", type=seconds_or_zero, default=0.25, metavar="SECONDS", help="seconds the sample agents wait between steps"
    )
    serve.add_argument("--deploy-ledger", type=writable_file, metavar="FILE", help="file the deployer appends each rollout to")
    serve.add_argument(
        "--lease", type=positive_seconds, default=300.0, metavar="SECONDS",
        help="seconds of a claim's lease, renewed while a turn runs",
    )
    serve.add_argument(
        "--webhook-retry", type=positive_seconds, default=RetrySchedule().first, metavar="SECONDS",
        help="seconds after a webhook's first failure before it is tried again (the wait doubles, up to an hour)",
    )
    serve.add_argument(
        "--webhook-give-up", type=positive_seconds, default=RetrySchedule().give_up, metavar="SECONDS",
        help="seconds a webhook may keep failing before its notification is given up (a dead letter)",
    )
    serve.add_argument(
        "--idle-lifespan", type=positive_seconds, metavar="SECONDS",
        help="seconds an idle task waits for input before it is closed (default: never)",
    )
    serve.add_argument(
        "--operator-token",
        help=f"bearer token of the operator principal (default: ${ENV_OPERATOR_TOKEN}, else {DEMO_OPERATOR_TOKEN} unless"
        " --require-auth)",
    )
    serve.add_argument("--config", type=Path, metavar="FILE", help="security configuration (TOML; docs/security.md)")
    serve.add_argument(
        "--allowed-host", action="append", default=[], type=allowed_host, metavar="HOST[:PORT]",
        help="answer requests whose Host header names this host (repeatable; '*' any); default: on loopback,"
        f" {', '.join(LOOPBACK_HOSTS)} at any port",
    )
    serve.add_argument(
        "--public-url", type=public_url, metavar="URL",
        help="the address clients reach the server at (e.g. behind a proxy); cards name and sign it",
    )
    serve.add_argument(
        "--require-auth", action="store_true",
        help="every agent requires a configured bearer token (no anonymous callers)",
    )
    serve.add_argument(
        "--allow-webhook-network", action="append", default=[], type=webhook_network, metavar="CIDR",
        help="let webhooks reach this non-public network, e.g. 127.0.0.1/32 (repeatable)",
    )
    serve.add_argument(
        "--limit", action="append", default=[], type=limit_setting, metavar="NAME=N",
        help="set a limit or timeout of docs/security.md, e.g. max_message_bytes=65536 or shutdown_timeout=5 (repeatable)",
    )
    serve.add_argument(
        "--user-token", action="append", default=[], type=user_token, metavar="TOKEN=NAME",
        help="bearer token of a named user principal, recognised by every agent (repeatable)",
    )
    serve.add_argument(
        "--agent", action="append", dest="agents", metavar="NAME|MODULE:ATTRIBUTE",
        help=f"serve this agent (repeatable): one of {', '.join(DOCUMENTED_AGENTS)}, or your own, MODULE:ATTRIBUTE naming an"
        " a2a_bridge.Agent or a function returning one, imported from the current directory (docs/your-agent.md);"
        " default: the three sample agents",
    )
    serve.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS, default="info", help="the least severe log lines shown")
    observability.register(serve)
    remote_config.add_options(serve)
    replay_command.register(commands)
    recorder.register(commands)
    planner.register(commands)
    operator_cli.register(commands)
    return root


async def serve(args: argparse.Namespace) -> None:
    settings = HostSettings(
        lease=timedelta(seconds=args.lease),
        idle_lifespan=timedelta(seconds=args.idle_lifespan) if args.idle_lifespan else None,
        webhook_retries=RetrySchedule(first=args.webhook_retry, give_up=args.webhook_give_up),
    )
    remotes: remote_config.RemoteConfig = args.remotes
    local: list[Agent] = args.served
    check_port(args.host, args.port, "--port")
    if args.kit_ports:
        served = {*(agent.name for agent in local), *(name for name, _ in remotes.agents)}
        for name, kit_port in KIT_PORTS.items():
            if name in served:
                check_port(args.host, kit_port, f"{name}'s kit port")
    stores = Stores(args.store)
    try:
        await check_store(stores)
    except CannotStart:
        await stores.close()
        raise
    bridge = Bridge(
        local + await remotes.specs([spec.name for spec in local]),
        stores,
        SystemClock(),
        ordered_id,
        settings,
        security=args.security,
        grpc=None if args.grpc_port is None else GrpcSettings(args.host, args.grpc_port, f"http://{args.host}:{args.port}"),
    )
    if args.grpc_port:
        http_ports = {args.port, *(KIT_PORTS.values() if args.kit_ports else ())}
        try:
            ports = {name: grpc_port(args.grpc_port + index, http_ports) for index, name in enumerate(bridge.agents)}
            for name, port in ports.items():
                check_port(args.host, port, f"{name}'s gRPC port")
        except CannotStart:
            await stores.close()
            raise
    kit = {name: kit_url(args.host, port) for name, port in KIT_PORTS.items() if args.kit_ports and name in bridge.agents}
    served = Served(args.security.public_url or http_url(args.host, args.port), args.host, kit)
    bridge.announce = lambda: log.info("%s", banner(installed_version(), bridge, served, args.store))
    app = TaskPaths(bridge.app(), bridge.ledger) if args.log_json else bridge.app()
    settle_garbage_collector()
    settle_allocator()
    limits = args.security.limits
    protocol = timed(limits.header_timeout, limits.body_timeout)
    logs = observability.uvicorn_logging(args)
    group: list[BoundedServer] = []

    def server(served: ASGIApp, port: int, lifespan: Literal["auto", "off"], front: bool = False) -> BoundedServer:
        """One address's uvicorn server: read timeouts, and a bounded shutdown shared with the other addresses;
        `front`: the bridge's `FrontDoor` outermost, in front of uvicorn's proxy headers, which it does inline."""
        draining = Draining(served)
        config = uvicorn.Config(
            draining, host=args.host, port=port, log_level=args.log_level, lifespan=lifespan, http=protocol,
            interface="asgi3", **logs
        )
        if front:
            config.app = bridge.front(ProxyHeadersMiddleware(draining, config.forwarded_allow_ips), draining)
            config.proxy_headers = False
        return BoundedServer(config, draining, limits.shutdown_timeout, group)

    servers = [server(app, args.port, "auto", front=True)]
    if args.kit_ports:
        kit = [(name, port) for name, port in KIT_PORTS.items() if name in bridge.agents]
        servers += [server(bridge.kit_app(name, kit_url(args.host, port)), port, "off") for name, port in kit]
    await asyncio.gather(*(one.serve() for one in servers))


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's event loop where it is installed (what uvicorn's "auto" picks when it starts the loop itself), else
    asyncio's: about a fifth of a trivial SendMessage's CPU is the loop's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


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
            args.remotes = remote_config.from_args(args)
            args.served = chosen_agents(args, bool(args.remotes.agents))
            check_demo_tokens(args.security, {agent.name: agent.tokens for agent in args.served if agent.tokens})
            with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
                runner.run(serve(args))
        except (ConfigError, AgentLoadError, CannotStart) as e:
            print(f"a2a-bridge serve: {e}", file=sys.stderr)
            raise SystemExit(2) from None
    elif hasattr(args, "run"):
        raise SystemExit(args.run(args))
