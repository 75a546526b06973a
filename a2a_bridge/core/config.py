"""Security configuration: principals (bearer tokens of users, agents and operators), whether every agent requires a
token, the networks webhooks may reach, and the request limits. Read from a TOML file and the environment;
docs/security.md describes both."""

import ipaddress
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from a2a_bridge.core.auth import KINDS, RESERVED_NAMES, Principal

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

ENV_PREFIX = "A2A_BRIDGE_"
DEMO_OPERATOR_TOKEN = "ops_demo_5b9e"
"""The operator's token in the demo (no principal configured, no --require-auth); it exists nowhere else."""
ENV_CONFIG = "A2A_BRIDGE_CONFIG"
ENV_PRINCIPALS = "A2A_BRIDGE_PRINCIPALS"
ENV_REQUIRE_AUTH = "A2A_BRIDGE_REQUIRE_AUTH"
ENV_OPERATOR_TOKEN = "A2A_BRIDGE_OPERATOR_TOKEN"
ENV_WEBHOOK_NETWORKS = "A2A_BRIDGE_ALLOW_WEBHOOK_NETWORKS"
ENV_ALLOWED_HOSTS = "A2A_BRIDGE_ALLOWED_HOSTS"
ENV_PUBLIC_URL = "A2A_BRIDGE_PUBLIC_URL"
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})
MAX_NAME = 255
"""Characters of a principal's name: the stores keep it as a task's owner in a column of this size."""
MAX_PRINCIPALS = 10_000
"""More principals than any file this server is meant for; a bound on every loop over them."""


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the file or variable and the entry."""


@dataclass(frozen=True)
class Limits:
    """What one request may carry, one task and one principal may hold, and how long a client may take to send a
    request and a shutdown to end (seconds)."""

    max_body_bytes: int = 1_048_576
    """Bytes of a request body, on every path of every agent (HTTP 413 past it)."""
    max_parts: int = 64
    """Parts in one message (-32602 on message.parts)."""
    max_text_bytes: int = 262_144
    """UTF-8 bytes of one text part (-32602 on message.parts[i].text)."""
    max_history: int = 100
    """Messages of history a task is returned with; a larger historyLength is -32602."""
    max_streams: int = 32
    """Streams one principal holds open at once, across agents: SendStreamingMessage, SubscribeToTask and the status
    stream (HTTP 429 past it). Every anonymous caller is one principal."""
    max_waits: int = 32
    """Long polls (`GET /{agent}/tasks/{id}/status?wait=S`) one principal holds open at once, across agents (HTTP
    429 past it)."""
    max_tasks_per_minute: int = 600
    """Messages that may start a task (SendMessage or SendStreamingMessage without a taskId) one principal sends in
    any 60 seconds, across agents and bindings, counted per process (HTTP 429, JSON-RPC -32600 naming the limit,
    gRPC RESOURCE_EXHAUSTED, past it)."""
    max_stored_bytes: int = 1_073_741_824
    """Bytes one principal's tasks hold in the store (each task's size as last stored, summed over the store every
    replica shares), across agents: a message whose bytes would take it past is refused (HTTP 429, JSON-RPC -32600,
    gRPC RESOURCE_EXHAUSTED)."""
    max_message_bytes: int = 1_048_576
    """Bytes of one message sent to an agent, its protobuf encoding (-32602 on message, HTTP+JSON 400)."""
    max_task_bytes: int = 16_777_216
    """Bytes of one task's history and artifacts as stored."""
    max_push_configs: int = 16
    """Push notification configs one principal sets on one task (-32602 past it); the stores keep them per owner."""
    header_timeout: int = 10
    """Seconds a client may take to send a request's line and headers (HTTP 408 and the connection closed)."""
    body_timeout: int = 30
    """Seconds a client may take to send a request's body once its headers arrived (HTTP 408, connection closed)."""
    shutdown_timeout: int = 10
    """Seconds from SIGTERM to the end of the process: open streams end at once, requests in flight get half."""


@dataclass(frozen=True)
class SecurityConfig:
    """Everything the security configuration decides."""

    principals: dict[str, Principal] = field(default_factory=dict)
    """Bearer token to principal; recognised by every agent."""
    require_auth: bool = False
    webhook_networks: tuple[Network, ...] = ()
    """Networks webhooks may reach beyond public addresses (loopback, private and link-local are refused otherwise)."""
    limits: Limits = field(default_factory=Limits)
    allowed_hosts: tuple[str, ...] = ()
    """Host header values the server answers (`a2a_bridge.http.request_guard`); empty: the default of where it listens."""
    public_url: str | None = None
    """The address cards name and sign (`--public-url`); None: unsigned cards name the address the caller used."""


def parse_bool(text: str, where: str) -> bool:
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ConfigError(f"{where}: expected true or false, got {text!r}")


def parse_network(text: str, where: str) -> Network:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError as e:
        raise ConfigError(f"{where}: {text!r} is not an address or a network (CIDR)") from e


def parse_host(text: str, where: str) -> str:
    """An allowed host: a name or address that a request's Host header may name, at any port (`localhost`, `[::1]`),
    or at one port (`bridge.example.com:8443`); `*` is any host. Lower case."""
    host = text.strip().lower()
    if host == "*":
        return host
    name, port = split_host(host)
    if not name or any(c in name for c in "/@?# \t") or (port is not None and not port.isdigit()):
        raise ConfigError(f"{where}: {text!r} is not a host name, an address or host:port")
    return host


def split_host(host: str) -> tuple[str, str | None]:
    """`name` and `port` of `name[:port]` (an IPv6 address in brackets); port None when absent."""
    if host.startswith("["):
        name, bracket, rest = host.partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return "", None
        return f"{name}]", rest[1:] if rest else None
    name, colon, port = host.partition(":")
    return name, port if colon else None


def parse_public_url(text: str, where: str) -> str:
    """The address the server is reached at from outside: http or https, a host, an optional path, nothing else."""
    parts = urlsplit(text.strip())
    try:
        port_ok = parts.port != 0
    except ValueError:
        port_ok = False
    if not port_ok or parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.query or parts.fragment:
        raise ConfigError(f"{where}: {text!r} is not an http(s) URL with a host (and no credentials, query or fragment)")
    return text.strip().rstrip("/")


def make_principal(token: str, name: str, kind: str, acts_for: list[str], where: str) -> Principal:
    """A principal, checked: a non-empty token and name, a known kind, `acts_for` only on agents. A name holds no
    `=`, so that an entry of the environment or the command line splits at the `=` beside the name."""
    if not token or any(c.isspace() for c in token):
        raise ConfigError(f"{where}: the token must be non-empty and hold no whitespace")
    if not name or name in RESERVED_NAMES:
        raise ConfigError(f"{where}: the name must be non-empty and not anonymous")
    if "=" in name:
        raise ConfigError(f"{where}: the name must not hold '='")
    if len(name) > MAX_NAME or not name.isprintable():
        raise ConfigError(f"{where}: the name must be printable and at most {MAX_NAME} characters")
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if acts_for and kind != "agent":
        raise ConfigError(f"{where}: only an agent principal acts for people (acts_for)")
    if any(not isinstance(person, str) or not person for person in acts_for):
        raise ConfigError(f"{where}: acts_for must list user names")
    return Principal(name, kind=kind, acts_for=frozenset(acts_for))


def env_principals(text: str) -> dict[str, Principal]:
    """`KIND:NAME=TOKEN` entries separated by whitespace or `;`; an agent names the people it acts for as
    `agent:NAME>PERSON+PERSON=TOKEN`."""
    principals: dict[str, Principal] = {}
    entries = text.replace(";", " ").split()
    if len(entries) > MAX_PRINCIPALS:
        raise ConfigError(f"{ENV_PRINCIPALS}: more than {MAX_PRINCIPALS} entries")
    for index, entry in enumerate(entries):
        where = f"{ENV_PRINCIPALS} entry {index + 1}"
        who, equals, token = entry.partition("=")
        kind, colon, name = who.partition(":")
        if not equals or not colon:
            raise ConfigError(f"{where}: expected KIND:NAME=TOKEN")
        name, _, persons = name.partition(">")
        principal = make_principal(token, name, kind, [p for p in persons.split("+") if p], where)
        principals = merged(principals, [(token, principal)], where)
    return principals


def user_entry(text: str, where: str) -> tuple[str, Principal]:
    """`TOKEN=NAME` of `--user-token`: a user's bearer token and name. A name holds no `=` and a token may (base64
    padding), so the entry splits at its last `=`, the one beside the name."""
    token, equals, name = text.rpartition("=")
    if not equals:
        raise ConfigError(f"{where}: expected TOKEN=NAME")
    return token, make_principal(token, name, "user", [], where)


def file_principals(entries: Any, where: str, environ: Mapping[str, str]) -> dict[str, Principal]:
    """The `[[principal]]` tables of a file: name, kind, token (or token_env, a variable holding it), acts_for."""
    if not isinstance(entries, list) or len(entries) > MAX_PRINCIPALS:
        raise ConfigError(f"{where}: principal must be an array of tables ([[principal]])")
    principals: dict[str, Principal] = {}
    for index, entry in enumerate(entries):
        at = f"{where} principal {index + 1}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{at}: expected a table")
        unknown = set(entry) - {"name", "kind", "token", "token_env", "acts_for"}
        if unknown:
            raise ConfigError(f"{at}: unknown keys {', '.join(sorted(unknown))}")
        token = entry.get("token")
        if "token_env" in entry:
            token = environ.get(str(entry["token_env"]))
            if token is None:
                raise ConfigError(f"{at}: the variable {entry['token_env']} is not set")
        acts_for = entry.get("acts_for", [])
        if not isinstance(token, str) or not isinstance(acts_for, list):
            raise ConfigError(f"{at}: token must be a string and acts_for a list of names")
        if token in principals:
            raise ConfigError(f"{at}: the same token is given twice")
        name, kind = str(entry.get("name", "")), str(entry.get("kind", "user"))
        principals[token] = make_principal(token, name, kind, acts_for, at)
    return principals


def limits_from(values: Mapping[str, Any], base: Limits, where: str) -> Limits:
    """`base` with the limits `values` names (positive integers)."""
    names = {f.name for f in fields(Limits)}
    changes: dict[str, int] = {}
    for key, value in values.items():
        if key not in names:
            raise ConfigError(f"{where}: unknown limit {key!r} (known: {', '.join(sorted(names))})")
        try:
            number = int(value)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}: {key} must be a positive integer") from e
        if isinstance(value, bool) or number < 1:
            raise ConfigError(f"{where}: {key} must be a positive integer")
        changes[key] = number
    return replace(base, **changes)


def from_file(path: Path, base: SecurityConfig, environ: Mapping[str, str]) -> SecurityConfig:
    where = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{where}: cannot be read ({e.strerror})") from e
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{where}: not valid TOML ({e})") from e
    unknown = set(data) - {"require_auth", "principal", "webhooks", "limits", "remote", "allowed_hosts", "public_url"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
    config = base
    if "require_auth" in data:
        if not isinstance(data["require_auth"], bool):
            raise ConfigError(f"{where}: require_auth must be true or false")
        config = replace(config, require_auth=data["require_auth"])
    if "principal" in data:
        config = replace(config, principals={**config.principals, **file_principals(data["principal"], where, environ)})
    hosts = data.get("allowed_hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ConfigError(f"{where}: allowed_hosts must be a list of host names")
    config = replace(config, allowed_hosts=(*config.allowed_hosts, *(parse_host(h, where) for h in hosts)))
    if "public_url" in data:
        if not isinstance(data["public_url"], str):
            raise ConfigError(f"{where}: public_url must be a string")
        config = replace(config, public_url=parse_public_url(data["public_url"], where))
    webhooks = data.get("webhooks", {})
    if not isinstance(webhooks, dict) or set(webhooks) - {"allow_networks"}:
        raise ConfigError(f"{where}: [webhooks] takes allow_networks only")
    networks = webhooks.get("allow_networks", [])
    if not isinstance(networks, list):
        raise ConfigError(f"{where}: webhooks.allow_networks must be a list of CIDR strings")
    config = replace(
        config, webhook_networks=(*config.webhook_networks, *(parse_network(str(n), where) for n in networks))
    )
    limits = data.get("limits", {})
    if not isinstance(limits, dict):
        raise ConfigError(f"{where}: [limits] must be a table")
    return replace(config, limits=limits_from(limits, config.limits, f"{where} [limits]"))


def from_environment(environ: Mapping[str, str], base: SecurityConfig) -> SecurityConfig:
    """`base` with what the A2A_BRIDGE_* variables set (docs/security.md lists them)."""
    config = base
    if ENV_REQUIRE_AUTH in environ:
        config = replace(config, require_auth=parse_bool(environ[ENV_REQUIRE_AUTH], ENV_REQUIRE_AUTH))
    if ENV_PRINCIPALS in environ:
        added = env_principals(environ[ENV_PRINCIPALS]).items()
        config = replace(config, principals=merged(config.principals, added, ENV_PRINCIPALS))
    if ENV_WEBHOOK_NETWORKS in environ:
        listed = environ[ENV_WEBHOOK_NETWORKS].replace(",", " ").split()
        added = tuple(parse_network(n, ENV_WEBHOOK_NETWORKS) for n in listed)
        config = replace(config, webhook_networks=(*config.webhook_networks, *added))
    if ENV_ALLOWED_HOSTS in environ:
        listed = environ[ENV_ALLOWED_HOSTS].replace(",", " ").split()
        config = replace(config, allowed_hosts=(*config.allowed_hosts, *(parse_host(h, ENV_ALLOWED_HOSTS) for h in listed)))
    if environ.get(ENV_PUBLIC_URL):
        config = replace(config, public_url=parse_public_url(environ[ENV_PUBLIC_URL], ENV_PUBLIC_URL))
    limits = {
        f.name: environ[f"{ENV_PREFIX}{f.name.upper()}"]
        for f in fields(Limits)
        if f"{ENV_PREFIX}{f.name.upper()}" in environ
    }
    return replace(config, limits=limits_from(limits, config.limits, "environment"))


def merged(principals: Mapping[str, Principal], added: Iterable[tuple[str, Principal]], where: str) -> dict[str, Principal]:
    """`principals` with `added`; a token that would name two principals (given twice with different names or kinds)
    is refused rather than the later one winning."""
    result = dict(principals)
    for token, principal in added:
        known = result.setdefault(token, principal)
        if known != principal:
            raise ConfigError(
                f"{where}: one token is given to two principals ({known.kind} {known.name}, {principal.kind} "
                f"{principal.name}); each principal needs a token of its own"
            )
    return result


def check_demo_tokens(config: SecurityConfig, demo_tokens: Mapping[str, Mapping[str, Principal]]) -> None:
    """No configured token is also an agent's demo token (`demo_tokens`: agent name to its tokens), which would make it
    two principals: the configured one on other agents, the demo's on that agent. Under require_auth demo tokens are
    not accepted, so nothing can clash."""
    if config.require_auth:
        return
    for agent, tokens in demo_tokens.items():
        for token, principal in tokens.items():
            known = config.principals.get(token)
            if known is not None:
                raise ConfigError(
                    f"the token of {known.kind} {known.name} is also agent {agent}'s demo token for {principal.name}; "
                    "choose another token (or --require-auth, under which demo tokens are not accepted)"
                )


def check_delegates(config: SecurityConfig) -> None:
    """Every person an agent acts for is a configured user."""
    users = {p.name for p in config.principals.values() if p.kind == "user"}
    for principal in config.principals.values():
        missing = sorted(principal.acts_for - users)
        if missing:
            raise ConfigError(f"agent {principal.name} acts for {', '.join(missing)}, who has no user token")


def check_names(config: SecurityConfig) -> None:
    """A name is one principal: the same name for two kinds (a user and an operator, say) is refused."""
    kinds: dict[str, str] = {}
    for principal in config.principals.values():
        known = kinds.setdefault(principal.name, principal.kind)
        if known != principal.kind:
            raise ConfigError(f"the name {principal.name} is given to two kinds of principal ({known}, {principal.kind})")


def load(path: Path | None, environ: Mapping[str, str], base: SecurityConfig | None = None) -> SecurityConfig:
    """Defaults (or `base`), then the file (`path`, else $A2A_BRIDGE_CONFIG), then the environment."""
    config = base or SecurityConfig()
    chosen = path or (Path(environ[ENV_CONFIG]) if environ.get(ENV_CONFIG) else None)
    if chosen is not None:
        config = from_file(chosen, config, environ)
    return from_environment(environ, config)
