"""The remote agents `serve` fronts, as configured: `--remote NAME=URL` and `--remote-timeout`, the configuration
file's `[remote]` table, and each remote card fetched and turned into the card the bridge serves (docs/remote.md)."""

import argparse
import os
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from a2a.client import A2ACardResolver
from a2a.client.errors import AgentCardResolutionError
from a2a.types import AgentCard, AgentExtension
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH

from a2a_bridge.agent import NAME
from a2a_bridge.app import AgentSpec
from a2a_bridge.core.arg_types import positive_seconds
from a2a_bridge.core.config import ENV_CONFIG, ConfigError
from a2a_bridge.core.task_status import who_must_act_extension
from a2a_bridge.remote.agent import DEFAULT_TIMEOUT, MAX_REMOTES, REMOTE_EXTENSION, RemoteAgent
from a2a_bridge.remote.faults import Patience, RemoteFailure, classify


def front_card(remote: AgentCard) -> AgentCard:
    """The remote card as we serve it: our interfaces (added per request), our extensions, no signatures, no extended
    card and no security of its own (the front serves anonymous callers; it sends no credentials onward)."""
    card = AgentCard()
    card.CopyFrom(remote)
    del card.supported_interfaces[:]
    del card.signatures[:]
    card.security_schemes.clear()
    del card.security_requirements[:]
    card.capabilities.extended_agent_card = False
    declared = {extension.uri for extension in card.capabilities.extensions}
    for extension in (who_must_act_extension(), remote_extension()):
        if extension.uri not in declared:
            card.capabilities.extensions.append(extension)
    return card


def remote_extension() -> AgentExtension:
    return AgentExtension(
        uri=REMOTE_EXTENSION,
        description=(
            "This agent is a remote A2A agent fronted by a2a-bridge: each task's metadata under this URI names the "
            "remote agent's URL and the remote task's id and context id."
        ),
        required=False,
    )


async def fetch_card(name: str, url: str, timeout: float) -> AgentCard:
    """The remote agent's card from its card URL (ending in .json) or base URL, retried within the timeout."""
    if urlsplit(url).path.endswith(".json"):
        base, path = url, ""
    else:
        base, path = url.rstrip("/"), AGENT_CARD_WELL_KNOWN_PATH
    patience = Patience(name, timeout)
    async with httpx.AsyncClient(timeout=timeout) as http:

        async def attempt() -> AgentCard:
            try:
                return await A2ACardResolver(http, base, agent_card_path=path).get_agent_card()
            except AgentCardResolutionError as error:
                raise patience.failure(classify(error, timeout)) from None

        return await patience.retry(attempt)


def remote_arg(text: str) -> tuple[str, str]:
    """`NAME=URL`: the prefix to serve the remote agent under, and its base or card URL."""
    name, _, url = text.partition("=")
    if not NAME.fullmatch(name):
        raise argparse.ArgumentTypeError("expected NAME=URL with NAME of lowercase letters, digits, '-' and '_'")
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
        raise argparse.ArgumentTypeError("expected NAME=URL with an http:// or https:// URL")
    return name, url


def add_options(serve: argparse.ArgumentParser) -> None:
    """`--remote NAME=URL` (repeatable) and `--remote-timeout SECONDS` on `a2a-bridge serve`."""
    serve.add_argument(
        "--remote", action="append", default=[], type=remote_arg, metavar="NAME=URL",
        help="front the remote A2A agent at URL (its base or card URL) under /NAME/ (repeatable)",
    )
    serve.add_argument(
        "--remote-timeout", type=positive_seconds, metavar="SECONDS",
        help=f"seconds a remote agent may take to answer a call and to recover from failing ones (default: {DEFAULT_TIMEOUT:g})",
    )


@dataclass(frozen=True)
class RemoteConfig:
    """The remote agents to front and their timeout."""

    agents: list[tuple[str, str]]
    timeout: float

    async def specs(self, taken: Iterable[str] = ()) -> list[AgentSpec]:
        """Each remote agent as served: its card fetched now (the server does not start without it)."""
        names = [name for name, _ in self.agents]
        clash = sorted({name for name in names if names.count(name) > 1} | (set(names) & set(taken)))
        if clash:
            raise ConfigError(f"a remote agent's name is already served: {', '.join(clash)}")
        specs = []
        for name, url in self.agents:
            try:
                card = await fetch_card(name, url, self.timeout)
            except RemoteFailure as failure:
                raise ConfigError(
                    f"no card from the remote agent {name} at {url}: {failure.detail}"
                ) from None
            card = pinned(name, url, card)
            specs.append(AgentSpec(name, front_card(card), RemoteAgent(name, card, url, self.timeout)))
        return specs


def origin(url: str) -> str:
    """`scheme://host:port` of a URL, the port written even when it is the scheme's default; '' when it is not an
    http(s) URL with a host and without credentials."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        return ""
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        return ""
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme.lower()}://{host.lower()}:{port}"


def pinned(name: str, url: str, card: AgentCard) -> AgentCard:
    """The remote card with only the interfaces at the origin the agent is configured with (`--remote NAME=URL`):
    the card decides where users' messages go, and a hostile or mistaken one could name any address (another host,
    a loopback admin API). A card that names none there is refused, in one line."""
    configured = origin(url)
    kept = [interface for interface in card.supported_interfaces if origin(interface.url) == configured]
    if not kept:
        named = sorted({origin(interface.url) or interface.url[:100] for interface in card.supported_interfaces})
        raise ConfigError(
            f"the remote agent {name}'s card names no interface at {configured}, where it is configured "
            f"(it names {', '.join(named) or 'none'}); a fronted agent is reached only at its configured origin"
        )
    result = AgentCard()
    result.CopyFrom(card)
    del result.supported_interfaces[:]
    result.supported_interfaces.extend(kept)
    return result


def from_args(args: argparse.Namespace) -> RemoteConfig:
    """The configuration file's `[remote]` table (`--config`, else $A2A_BRIDGE_CONFIG), then `--remote` and
    `--remote-timeout`, which add to it and override its timeout."""
    path: Path | None = getattr(args, "config", None)
    if path is None and os.environ.get(ENV_CONFIG):
        path = Path(os.environ[ENV_CONFIG])
    agents, timeout = file_remotes(path) if path is not None else ([], None)
    return RemoteConfig([*agents, *args.remote], args.remote_timeout or timeout or DEFAULT_TIMEOUT)


def file_remotes(path: Path) -> tuple[list[tuple[str, str]], float | None]:
    """The `[remote]` table of a configuration file: `timeout` (seconds) and `agents` (`NAME = "URL"`)."""
    where = f"{path} [remote]"
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("remote", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        raise ConfigError(f"{path} cannot be read as TOML") from None
    if not isinstance(table, dict) or set(table) - {"timeout", "agents"}:
        raise ConfigError(f"{where}: takes timeout and agents only")
    timeout = table.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
        raise ConfigError(f"{where}: timeout must be a positive number of seconds")
    agents = table.get("agents", {})
    if not isinstance(agents, dict) or len(agents) > MAX_REMOTES:
        raise ConfigError(f"{where}: agents must be a table of NAME = \"URL\" (at most {MAX_REMOTES})")
    try:
        remotes = [remote_arg(f"{name}={url}") for name, url in agents.items() if isinstance(url, str)]
    except argparse.ArgumentTypeError as e:
        raise ConfigError(f"{where}: {e}") from None
    if len(remotes) != len(agents):
        raise ConfigError(f"{where}: each agent's URL must be a string")
    return remotes, float(timeout) if timeout is not None else None
