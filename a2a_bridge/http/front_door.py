"""`FrontDoor`, outermost: a request the direct path answers (a POST of JSON-RPC `SendMessage` or `GetTask` to an
agent's `/{name}/a2a/jsonrpc`) is answered there, with what each layer of the chain in front of the direct path does
for it done inline: uvicorn's proxy headers, `Draining`, `RequestGuard`, `AgentMounts`, `TrailingSlash`,
`BearerGate`, `StatusPolls`, `BindingMediaTypes` and `RequestLimits`, each layer no longer a call of its own with
its wrapper of `send`. It takes only a request none of them would refuse, change or read differently: its headers
plain (one Host, well formed and allowed; at most one Authorization, a known token where the agent has a gate; a JSON
Content-Type and a Content-Length within `max_body_bytes`; no Origin, Transfer-Encoding or forwarding header), no
query, and a body that parses with nothing the stores cannot hold into an envelope the direct path answers, within
the caller's quotas. Everything else, the body already read included (handed on as it arrived), goes through the
whole chain, which answers it as before."""

import asyncio
from typing import NamedTuple

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from a2a_bridge.core.auth import Principal, bearer_of
from a2a_bridge.http.agent_mounts import AgentMounts
from a2a_bridge.http.direct_rpc import DirectRpc, steps_aside
from a2a_bridge.http.json_bodies import json_headers
from a2a_bridge.http.limits import PARSED_BODY, SEND_METHODS, RequestLimits, starts_task
from a2a_bridge.http.media_type import JSON_TYPES, PLAIN_JSON, Heads, answer_type, essence, relabelled
from a2a_bridge.http.request_body import ClientGone, body_message, read_body, replayed
from a2a_bridge.http.request_guard import host_allowed, well_formed_host
from a2a_bridge.http.shutdown import UNAVAILABLE, Draining
from a2a_bridge.store.storable import parse

TAKEN_ELSEWHERE = frozenset({b"origin", b"transfer-encoding", b"x-forwarded-for", b"x-forwarded-proto"})
"""Request headers with which the chain's layers do more than the front door does (the guard's same-site check,
a chunked body's limits, uvicorn's proxy headers): a request carrying one goes through the chain."""
KEPT = 64
"""How many Host values, and Accept and Content-Type pairs, the front door keeps what it found of (callers send few)."""


class DirectAgent(NamedTuple):
    """One agent's JSON-RPC path as the chain serves it: the agent's mount in `AgentMounts` and its prefix there,
    its direct path and request limits, the tokens its `BearerGate` accepts (None without a gate), and the principals
    its limits count a caller's bearer token as (`ServedAgent.principal_name`)."""

    mount: Mount
    prefix: str
    rpc: DirectRpc
    limits: RequestLimits
    gate: dict[str, Principal] | None
    tokens: dict[str, Principal]


class Answer(NamedTuple):
    """What the direct path answered: status, headers (labelled) and body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


class FrontDoor:
    """ASGI, outermost (uvicorn's proxy headers are in `app`): answers the direct path's requests as the module's
    docstring says; hands everything else to `app`, the whole chain with `draining` in it."""

    def __init__(
        self,
        app: ASGIApp,
        draining: Draining,
        mounts: AgentMounts,
        allowed_hosts: tuple[str, ...],
        agents: dict[str, DirectAgent],
    ) -> None:
        self.app = app
        self.draining = draining
        self.mounts = mounts
        self.allowed_hosts = allowed_hosts
        self.agents = agents
        """Each agent's JSON-RPC path, `/{name}/a2a/jsonrpc`."""
        self.hosts: set[bytes] = set()
        """Host values the guard lets through (at most `KEPT`)."""
        self.labels: dict[tuple[bytes | None, bytes | None], bytes] = {}
        """The answer's media type by Accept and Content-Type (at most `KEPT`)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        agent = self.agents.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if agent is None or scope.get("query_string") or scope.get("root_path") or steps_aside():
            await self.app(scope, receive, send)
            return
        heads = self.heads(scope, agent)
        if heads is None:
            await self.app(scope, receive, send)
            return
        try:
            outcome = await self.answer(scope, receive, agent, heads[0], heads[1])
        except asyncio.CancelledError:
            if not self.draining.stopping:
                raise
            task = asyncio.current_task()
            assert task is not None
            task.uncancel()
            await JSONResponse(UNAVAILABLE, 503, headers={"Retry-After": "5"})(scope, receive, send)
            return
        if isinstance(outcome, Answer):
            await send({"type": "http.response.start", "status": outcome.status, "headers": outcome.headers})
            await send({"type": "http.response.body", "body": outcome.body})
        elif outcome is not None:
            await self.app(scope, outcome, send)

    def heads(self, scope: Scope, agent: DirectAgent) -> tuple[bytes, str | None] | None:
        """The media type the answer is labelled with and the caller's bearer token, for a request whose headers
        every layer lets through as they are (the module's docstring); None for any other."""
        host: bytes | None = None
        authorization: bytes | None = None
        accept: bytes | None = None
        content_type: bytes | None = None
        length: bytes | None = None
        hosts = authorizations = lengths = 0
        for name, value in scope["headers"]:
            if name == b"host":
                hosts += 1
                host = value
            elif name == b"content-type":
                content_type = value if content_type is None else content_type
            elif name == b"content-length":
                lengths += 1
                length = value
            elif name == b"accept":
                accept = value if accept is None else accept
            elif name == b"authorization":
                authorizations += 1
                authorization = value
            elif name in TAKEN_ELSEWHERE:
                return None
        if hosts > 1 or authorizations > 1 or lengths != 1 or length is None or not self.host_passes(host):
            return None
        token = bearer_of(authorization.decode("latin-1") if authorization else "")
        if agent.gate is not None and token not in agent.gate:
            return None
        try:
            size = int(length)
        except ValueError:
            return None
        if not 0 < size <= agent.limits.limits.max_body_bytes:
            return None
        if content_type is None or essence(content_type.decode("latin-1")) not in JSON_TYPES:
            return None
        key = (accept, content_type)
        label = self.labels.get(key)
        if label is None:
            read = Heads(accept.decode("latin-1") if accept is not None else None, content_type.decode("latin-1"))
            label = answer_type(scope, read).encode()
            if len(self.labels) < KEPT:
                self.labels[key] = label
        return label, token

    def host_passes(self, host: bytes | None) -> bool:
        """Whether `RequestGuard` lets a request with this one Host value (or none) through."""
        if host is None:
            return not self.allowed_hosts
        if host in self.hosts:
            return True
        text = host.decode("latin-1")
        if not well_formed_host(text) or (self.allowed_hosts and not host_allowed(text, self.allowed_hosts)):
            return False
        if len(self.hosts) < KEPT:
            self.hosts.add(host)
        return True

    async def answer(
        self, scope: Scope, receive: Receive, agent: DirectAgent, label: bytes, token: str | None
    ) -> Answer | Receive | None:
        """The direct path's answer; or, for a request the direct path or a layer in front of it would treat
        otherwise, a receive that hands the chain the body as it arrived; None when the client left while sending."""
        try:
            messages, body = await read_body(receive, agent.limits.limits.max_body_bytes)
        except ClientGone:
            return None
        if body is None:
            return replayed(messages, receive)
        parsed, unreadable, flaw = parse(body)
        method = parsed.get("method") if isinstance(parsed, dict) else None
        if unreadable or flaw is not None or not isinstance(method, str) or method not in agent.rpc.methods:
            return replayed(messages, receive)
        call = agent.rpc.call_of(parsed, method)
        if call is None:
            return replayed(messages, receive)
        if method in SEND_METHODS:
            limits = agent.limits
            principal = agent.tokens.get(token) if token else None
            who = principal.name if principal is not None else ""
            if await limits.slots.admit(who, starts_task(parsed, True), len(body), limits.limits) is not None:
                return replayed(messages, receive)
        scope = self.mounts.mounted(scope, agent.mount, agent.prefix)
        scope[PARSED_BODY] = parsed
        request_id, method, params, handled = call
        answer = await agent.rpc.answer(Request(scope, replayed([body_message(body)], receive)), request_id, method, params, handled)
        if isinstance(answer, bytes):
            headers = json_headers(answer)
            return Answer(200, headers if label == PLAIN else relabelled(headers, label), answer)
        return Answer(answer.status_code, relabelled(answer.raw_headers, label), bytes(answer.body))


PLAIN = PLAIN_JSON.encode()
