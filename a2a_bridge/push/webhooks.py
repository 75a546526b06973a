"""Where push notifications may go and how their failures are logged: the webhook policy (only to addresses it allows,
checked at creation and at each connection) and the log of failing webhooks (once, then with backoff). The posts
themselves are `webhook_wire`'s; what is delivered when is the outbox's (`outbox.Outbox`)."""

import asyncio
import functools
import ipaddress
import logging
import socket
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from a2a.types import TaskPushNotificationConfig

log = logging.getLogger(__name__)

MAX_ADDRESSES = 32
"""How many resolved addresses of one host are checked; a host with more is refused."""

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for a host."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")
"""RFC 8215's local-use translation prefix: where in it an IPv4 address sits is the operator's choice, so it is
refused as a whole (unless configuration allows it)."""
TEREDO = ipaddress.IPv6Network("2001::/32")
COMPATIBLE = ipaddress.IPv6Network("::/96")
ISATAP_IDS = (0x00005EFE, 0x02005EFE)
"""The high 32 bits of an ISATAP interface id (RFC 5214), whose low 32 bits are an IPv4 address."""


def embedded(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries and is routed by: IPv4-mapped, 6to4 (2002::/16), NAT64
    (64:ff9b::/96), Teredo (2001::/32: its server and its de-obfuscated client), IPv4-compatible (::/96) and an
    ISATAP interface id."""
    value = int(address)
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    if address in SIX_TO_FOUR or address in NAT64:
        return (ipaddress.IPv4Address((value >> 80) & 0xFFFFFFFF if address in SIX_TO_FOUR else value & 0xFFFFFFFF),)
    if address in TEREDO:
        server, client = (value >> 64) & 0xFFFFFFFF, ~value & 0xFFFFFFFF
        return (ipaddress.IPv4Address(server), ipaddress.IPv4Address(client))
    if address in COMPATIBLE and value > 0xFFFF:
        return (ipaddress.IPv4Address(value & 0xFFFFFFFF),)
    if (value >> 32) & 0xFFFFFFFF in ISATAP_IDS:
        return (ipaddress.IPv4Address(value & 0xFFFFFFFF),)
    return ()


def public(address: Address) -> bool:
    """A global unicast address: not loopback, private, link-local, unique-local, shared, multicast, reserved or
    unspecified. An IPv6 address that carries IPv4 addresses (`embedded`) is judged as them: IPv4-mapped, 6to4,
    NAT64 and Teredo ones by them alone, IPv4-compatible and ISATAP ones by them and by themselves; 64:ff9b:1::/48
    is refused."""
    if isinstance(address, ipaddress.IPv6Address):
        if address in LOCAL_NAT64:
            return False
        carried = embedded(address)
        if carried:
            judged_alone = address.ipv4_mapped is not None or any(
                address in network for network in (SIX_TO_FOUR, NAT64, TEREDO)
            )
            return all(public(a) for a in carried) and (judged_alone or own_public(address))
    return own_public(address)


def own_public(address: Address) -> bool:
    """Whether an address is global unicast by its own prefix, whatever it carries."""
    return address.is_global and not (address.is_multicast or address.is_reserved or address.is_unspecified)


@dataclass(frozen=True)
class WebhookPolicy:
    """Where webhooks may go: public addresses, and the networks configuration allows (loopback in the tests)."""

    allowed_networks: tuple[Network, ...] = ()
    resolve: Resolver | None = None
    """How host names are resolved; None for the system resolver (`system_resolver`, looked up at each call)."""

    def __hash__(self) -> int:
        """Hashed once: a policy keys the caches of its judgements (`literal_refusal`), asked at every delivery run,
        and hashing its networks anew each time cost more than the judgement."""
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.allowed_networks, self.resolve))
            object.__setattr__(self, "_hash", cached)
        return cached

    def allows(self, address: Address) -> bool:
        mapped = getattr(address, "ipv4_mapped", None)
        candidates = (address, mapped) if mapped is not None else (address,)
        if any(a in network for a in candidates for network in self.allowed_networks if a.version == network.version):
            return not (address.is_multicast or address.is_unspecified)
        return public(address)

    async def addresses(self, host: str, port: int) -> list[Address] | None:
        """The host's addresses when every one is allowed; None when any is not, or the host does not resolve."""
        literal = host.strip("[]").split("%", 1)[0]
        try:
            found: Iterable[str] = [str(ipaddress.ip_address(literal))]
        except ValueError:
            try:
                found = await (self.resolve or system_resolver)(host, port)
            except OSError:
                return None
        addresses: list[Address] = []
        for text in list(found)[: MAX_ADDRESSES + 1]:
            try:
                addresses.append(ipaddress.ip_address(text.split("%", 1)[0]))
            except ValueError:
                return None
        if not addresses or len(addresses) > MAX_ADDRESSES or not all(self.allows(a) for a in addresses):
            return None
        return addresses

    async def refusal(self, url: str) -> str | None:
        """Why a webhook URL is refused, or None when it may be used: a URL whose host is an address is judged once
        (`literal_refusal`), a host name resolved at each call."""
        reason, host, port = url_parts(url)
        if reason is not None or host is None:
            return reason
        literal, reason = literal_refusal(self, url)
        if literal:
            return reason
        if await self.addresses(host, port) is None:
            return REFUSED_ADDRESS
        return None


REFUSED_ADDRESS = "url must resolve to public addresses only (loopback, private and link-local are refused)"


@functools.lru_cache(maxsize=4096)
def url_parts(url: str) -> tuple[str | None, str | None, int]:
    """Why a URL cannot be a webhook's whatever its host's addresses (None when it may be), its host and port."""
    try:
        parsed = urllib.parse.urlsplit(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return "url is not a valid URL", None, 0
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return "url must be an http or https URL with a host", None, 0
    if parsed.username or parsed.password:
        return "url must not carry credentials; use authentication", None, 0
    return None, parsed.hostname, port


@functools.lru_cache(maxsize=4096)
def literal_refusal(policy: WebhookPolicy, url: str) -> tuple[bool, str | None]:
    """For a URL that may be a webhook's and whose host is an IP address: (True, why the policy refuses it, or None);
    (False, None) when its host is a name, which is resolved at each check."""
    _, host, _ = url_parts(url)
    try:
        address = ipaddress.ip_address((host or "").strip("[]").split("%", 1)[0])
    except ValueError:
        return False, None
    return True, None if policy.allows(address) else REFUSED_ADDRESS


FIRST_REPEAT = 60.0
"""Seconds after a webhook's first failure before a failing webhook is logged again; the interval doubles."""
MAX_REPEAT = 3600.0
MAX_FAILING = 10_000
"""Failing webhooks remembered at once; the oldest is forgotten past it (and logged again if it fails again)."""


@dataclass
class Failing:
    """A webhook that failed and has not delivered since."""

    failures: int
    unlogged: int
    next_line: float
    interval: float


class FailureLog:
    """Log lines of failing webhooks, per task and config: one at the first failure, then at most one per interval
    (FIRST_REPEAT, doubling up to MAX_REPEAT) counting the failures since, and one when the webhook delivers again;
    never a traceback."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.failing: OrderedDict[tuple[str, str], Failing] = OrderedDict()

    def failed(self, task_id: str, config: TaskPushNotificationConfig, reason: str) -> None:
        key = (task_id, config.id)
        now = self.clock()
        known = self.failing.get(key)
        if known is None:
            if len(self.failing) >= MAX_FAILING:
                self.failing.popitem(last=False)
            self.failing[key] = Failing(1, 0, now + FIRST_REPEAT, FIRST_REPEAT)
            log.warning(
                "webhook %s of task %s to %s failed: %s (logged again at most every %g s while it fails)",
                config.id, task_id, shown_host(config.url), reason, FIRST_REPEAT,
            )
            return
        known.failures += 1
        known.unlogged += 1
        if now >= known.next_line:
            log.warning(
                "webhook %s of task %s to %s still failing: %d failures since the last line, %d in all; last: %s",
                config.id, task_id, shown_host(config.url), known.unlogged, known.failures, reason,
            )
            known.unlogged = 0
            known.interval = min(known.interval * 2, MAX_REPEAT)
            known.next_line = now + known.interval

    def delivered(self, task_id: str, config: TaskPushNotificationConfig) -> None:
        known = self.failing.pop((task_id, config.id), None)
        if known is not None:
            log.info("webhook %s of task %s delivers again after %d failures", config.id, task_id, known.failures)


def shown_host(url: str) -> str:
    """Where a webhook goes, as a log line shows it: host and port, never the path or query (they may hold a
    secret)."""
    try:
        parsed = urllib.parse.urlsplit(url)
        return f"{parsed.hostname}:{parsed.port or (443 if parsed.scheme == 'https' else 80)}"
    except ValueError:
        return "an invalid URL"
