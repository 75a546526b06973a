"""Push notifications: the SDK's sender, delivering each task's updates in order as application/a2a+json, only to
addresses the webhook policy allows."""

import asyncio
import ipaddress
import logging
import socket
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import httpcore
import httpx
from a2a.server.tasks import BasePushNotificationSender, PushNotificationConfigStore
from a2a.types import TaskArtifactUpdateEvent, TaskStatusUpdateEvent

log = logging.getLogger(__name__)

A2A_JSON = "application/a2a+json"
MAX_ADDRESSES = 32
"""How many resolved addresses of one host are checked; a host with more is refused."""

Update = TaskStatusUpdateEvent | TaskArtifactUpdateEvent
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for a host."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def public(address: Address) -> bool:
    """A global unicast address: not loopback, private, link-local, unique-local, shared, multicast, reserved or
    unspecified (an IPv4-mapped IPv6 address is judged as its IPv4 address)."""
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    return address.is_global and not (address.is_multicast or address.is_reserved or address.is_unspecified)


@dataclass(frozen=True)
class WebhookPolicy:
    """Where webhooks may go: public addresses, and the networks configuration allows (loopback in the tests)."""

    allowed_networks: tuple[Network, ...] = ()
    resolve: Resolver | None = None
    """How host names are resolved; None for the system resolver (`system_resolver`, looked up at each call)."""

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
        """Why a webhook URL is refused, or None when it may be used."""
        try:
            parsed = urllib.parse.urlsplit(url)
            port = parsed.port or (443 if parsed.scheme == "https" else 80)
        except ValueError:
            return "url is not a valid URL"
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            return "url must be an http or https URL with a host"
        if parsed.username or parsed.password:
            return "url must not carry credentials; use authentication"
        if await self.addresses(parsed.hostname, port) is None:
            return "url must resolve to public addresses only (loopback, private and link-local are refused)"
        return None

    async def accepts(self, url: str) -> bool:
        """The SDK sender's push_url_validator: checked again at every delivery, as DNS answers may change."""
        reason = await self.refusal(url)
        if reason is not None:
            log.warning("webhook not sent: %s", reason)
        return reason is None


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to addresses the policy allows, resolving each host once and connecting to what it checked, so
    a DNS answer that changes after the check (rebinding) cannot redirect a webhook."""

    def __init__(self, policy: WebhookPolicy, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.policy = policy
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self.policy.addresses(host, port)
        if addresses is None:
            raise httpcore.ConnectError("the webhook's address is not allowed")
        return await self.inner.connect_tcp(str(addresses[0]), port, timeout, local_address, socket_options)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("webhooks go over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a connection pool whose every connection goes through a GuardedBackend."""

    def __init__(self, policy: WebhookPolicy) -> None:
        super().__init__()
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(), network_backend=GuardedBackend(policy)
        )


async def _a2a_content_type(request: httpx.Request) -> None:
    """Webhooks carry the A2A media type, as the specification says; the SDK sends application/json."""
    request.headers["Content-Type"] = A2A_JSON


def webhook_client(policy: WebhookPolicy | None = None, timeout: float = 10.0) -> httpx.AsyncClient:
    """The client webhooks are sent with: no proxy from the environment, no redirects, connections guarded."""
    return httpx.AsyncClient(
        timeout=timeout,
        event_hooks={"request": [_a2a_content_type]},
        transport=GuardedTransport(policy or WebhookPolicy()),
        trust_env=False,
        follow_redirects=False,
    )


class PushDispatcher:
    """Queues each task's updates and delivers them one after another, off the request path."""

    def __init__(self, sender: BasePushNotificationSender) -> None:
        self._sender = sender
        self._queues: dict[str, asyncio.Queue[Update]] = {}
        self._workers: set[asyncio.Task[None]] = set()

    @classmethod
    def over(
        cls, client: httpx.AsyncClient, store: PushNotificationConfigStore, policy: WebhookPolicy | None = None
    ) -> "PushDispatcher":
        """The SDK's sender, which sends a config's `authentication` as `Authorization: {scheme} {credentials}` and its
        token as `X-A2A-Notification-Token` (a2a-python#585), with the policy checking each URL again at delivery."""
        return cls(BasePushNotificationSender(client, store, push_url_validator=(policy or WebhookPolicy()).accepts))

    def notify(self, task_id: str, event: Update) -> None:
        queue = self._queues.get(task_id)
        if queue is None:
            queue = self._queues[task_id] = asyncio.Queue()
            worker = asyncio.create_task(self._drain(task_id, queue))
            self._workers.add(worker)
            worker.add_done_callback(self._workers.discard)
        queue.put_nowait(event)

    async def _drain(self, task_id: str, queue: "asyncio.Queue[Update]") -> None:
        while not queue.empty():
            event = queue.get_nowait()
            await self._sender.send_notification(task_id, event)
        self._queues.pop(task_id, None)

    async def drain(self) -> None:
        """Wait until every queued notification has been attempted."""
        while self._workers:
            await asyncio.wait(list(self._workers))
