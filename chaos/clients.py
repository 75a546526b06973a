"""The clients: concurrent asyncio tasks that use the replicas as an operator's users would (long test runs, follow-
ups, cancels from another replica, deploys with an operator's approval, subscriptions), retrying the same messageId
on any error or timeout, and recording every request and every state seen in the history."""

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from httpx_sse import SSEError, aconnect_sse

from a2a_bridge.agents.catalog import DEPLOYER_TOKEN
from chaos.cluster import OPERATOR_TOKEN, Replica
from chaos.history import TERMINAL_STATES, WAITING_STATES, History, Message, Observation, Operation, now

A2A = {"A2A-Version": "1.0"}
AUTH = {"deployer": {"Authorization": f"Bearer {DEPLOYER_TOKEN}"}}
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
RETRYABLE = {-32603}
"""JSON-RPC errors a client retries (internal errors, store outages, a replica without a session)."""
CALL_TIMEOUT = 20.0
"""Seconds one HTTP request may take before the client gives up on it and retries."""
CALL_DEADLINE = 60.0
"""Seconds a client keeps retrying one call."""
MAX_ATTEMPTS = 40
WATCH_DEADLINE = 90.0
"""Seconds a client follows one task (polls or a stream) before moving on."""
SCENARIO_DEADLINE = 150.0
UNIT_TESTS = "Run the unit tests for payments-api at commit {commit}"
FULL_SUITE = "Run the full suite for payments-api at commit {commit}"
ASK_COMMIT = "Run the unit tests for payments-api"
COMMITS = ("9f3c2e1", "4b1d9a7", "c0ffee1")


def states_in(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(task id, state) of each task or status update in a JSON-RPC result or stream frame."""
    found: list[tuple[str, str]] = []
    task = result.get("task", result if "status" in result and "id" in result else None)
    if isinstance(task, dict) and "status" in task:
        found.append((task["id"], task["status"].get("state", "")))
    update = result.get("statusUpdate")
    if isinstance(update, dict):
        found.append((update.get("taskId", ""), update.get("status", {}).get("state", "")))
    return found


class Client:
    """One simulated user: picks scenarios at random until `stop` is set."""

    def __init__(
        self, number: int, replicas: list[Replica], history: History, rng: random.Random, http: httpx.AsyncClient,
        stop: asyncio.Event, prefix: str,
    ) -> None:
        self.number = number
        self.replicas = replicas
        self.history = history
        self.rng = rng
        self.http = http
        self.stop = stop
        self.prefix = prefix
        self.sequence = 0

    def message_id(self) -> str:
        self.sequence += 1
        return f"{self.prefix}-c{self.number}-m{self.sequence}"

    def pick(self, avoid: str | None = None) -> Replica:
        choices = [r for r in self.replicas if r.name != avoid] or self.replicas
        return self.rng.choice(choices)

    def _observe(self, result: dict[str, Any], replica: str, source: str, invoked: float, stream: int | None = None) -> None:
        for task_id, state in states_in(result):
            if task_id and state:
                self.history.observe(Observation(task_id, state, replica, source, invoked, now(), stream))

    async def call(
        self, agent: str, method: str, params: dict[str, Any], message_id: str | None = None, first: Replica | None = None,
    ) -> dict[str, Any] | None:
        """A JSON-RPC call, retried (to any replica, the same params) on transport errors, 5xx and internal errors; its
        result, or None when it ended in an error or ran out of attempts."""
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        headers = {**A2A, **AUTH.get(agent, {})}
        deadline = now() + CALL_DEADLINE
        replica = first or self.pick()
        for _ in range(MAX_ATTEMPTS):
            invoked = now()
            op = Operation(self.number, method, replica.name, invoked, invoked, message_id, params.get("id"))
            try:
                response = await self.http.post(
                    f"{replica.base}/{agent}/a2a/jsonrpc", json=body, headers=headers, timeout=CALL_TIMEOUT
                )
                envelope = response.json() if response.status_code < 500 else {}
            except (httpx.HTTPError, json.JSONDecodeError) as failure:
                envelope = {}
                op.outcome, op.detail = type(failure).__name__, str(failure)[:200]
            else:
                if response.status_code >= 500:
                    op.outcome, op.detail = f"http {response.status_code}", response.text[:200]
            op.completed = now()
            result = envelope.get("result") if isinstance(envelope, dict) else None
            error = envelope.get("error") if isinstance(envelope, dict) else None
            if result is not None:
                tasks = states_in(result)
                op.task_id = op.task_id or (tasks[0][0] if tasks else None)
                self.history.operation(op)
                self._observe(result, replica.name, method, invoked)
                return result
            if error is not None:
                op.outcome, op.detail = str(error.get("code")), str(error.get("message"))[:200]
            self.history.operation(op)
            if error is not None and error.get("code") not in RETRYABLE:
                return None
            if now() > deadline:
                break
            await asyncio.sleep(self.rng.uniform(0.1, 0.5))
            replica = self.pick()
        return None

    async def send(self, agent: str, text: str, blocking: bool, task: dict[str, str] | None = None) -> str | None:
        """SendMessage under a fresh messageId (retried under the same one); the acknowledged task id, if any."""
        message_id = self.message_id()
        message: dict[str, Any] = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}], **(task or {})}
        self.history.sent(Message(message_id, agent, text, follow_up_of=(task or {}).get("taskId")))
        params: dict[str, Any] = {"message": message, "configuration": {"returnImmediately": not blocking}}
        result = await self.call(agent, "SendMessage", params, message_id)
        found = states_in(result) if result else []
        if not found:
            return None
        self.history.acknowledged(message_id, found[0][0])
        return found[0][0]

    async def get(self, agent: str, task_id: str) -> str | None:
        result = await self.call(agent, "GetTask", {"id": task_id, "historyLength": 0})
        return result["status"]["state"] if result else None

    async def watch(self, agent: str, task_id: str, until: Callable[[str], bool]) -> str | None:
        """Poll GetTask on random replicas until `until(state)` or the deadline; the last state seen."""
        deadline = now() + WATCH_DEADLINE
        state: str | None = None
        while now() < deadline:
            state = await self.get(agent, task_id)
            if state is not None and until(state):
                return state
            await asyncio.sleep(self.rng.uniform(0.2, 0.6))
        return state

    async def subscribe(self, agent: str, task_id: str) -> None:
        """SubscribeToTask on a random replica, resubscribing elsewhere when the stream breaks, until a terminal or
        waiting state arrives (or the deadline); every frame observed."""
        deadline = now() + WATCH_DEADLINE
        body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
        headers = {**A2A, **AUTH.get(agent, {})}
        for _ in range(MAX_ATTEMPTS):
            replica = self.pick()
            stream = self.history.next_stream()
            invoked = now()
            op = Operation(self.number, "SubscribeToTask", replica.name, invoked, invoked, None, task_id)
            last = ""
            try:
                async with asyncio.timeout(max(1.0, deadline - now())):
                    async with aconnect_sse(
                        self.http, "POST", f"{replica.base}/{agent}/a2a/jsonrpc", json=body, headers=headers,
                        timeout=httpx.Timeout(CALL_TIMEOUT, read=None),
                    ) as source:
                        async for event in source.aiter_sse():
                            if not event.data:
                                continue
                            frame = event.json()
                            if "error" in frame:
                                op.outcome, op.detail = str(frame["error"].get("code")), str(frame["error"].get("message"))[:200]
                                break
                            self._observe(frame.get("result") or {}, replica.name, "SubscribeToTask", invoked, stream)
                            last = next((s for _, s in reversed(states_in(frame.get("result") or {}))), last)
            except (httpx.HTTPError, SSEError, json.JSONDecodeError, TimeoutError) as failure:
                op.outcome, op.detail = type(failure).__name__, str(failure)[:200]
            op.completed = now()
            self.history.operation(op)
            if not stream_broken(op.outcome, last) or now() > deadline:
                return
            await asyncio.sleep(self.rng.uniform(0.2, 0.5))

    async def cancel(self, agent: str, task_id: str, avoid: str | None) -> None:
        await self.call(agent, "CancelTask", {"id": task_id}, first=self.pick(avoid))

    async def approve(self, task_id: str) -> None:
        """POST /deployer/approve/{id} with the operator's token, retried on transport errors and 5xx, and on 409 while
        the task still waits for approval (a replica that has not seen it wait yet)."""
        deadline = now() + CALL_DEADLINE
        for _ in range(MAX_ATTEMPTS):
            replica = self.pick()
            invoked = now()
            op = Operation(self.number, "approve", replica.name, invoked, invoked, None, task_id)
            try:
                response = await self.http.post(f"{replica.base}/deployer/approve/{task_id}", headers=OPERATOR, timeout=CALL_TIMEOUT)
                op.outcome = "ok" if response.status_code == 200 else f"http {response.status_code}"
                op.detail = response.text[:200] if response.status_code != 200 else ""
            except httpx.HTTPError as failure:
                op.outcome, op.detail = type(failure).__name__, str(failure)[:200]
            op.completed = now()
            self.history.operation(op)
            if op.outcome == "ok" or now() > deadline:
                return
            if op.outcome == "http 409" and await self.get("deployer", task_id) != "TASK_STATE_AUTH_REQUIRED":
                return
            if op.outcome.startswith("http 4") and op.outcome != "http 409":
                return
            await asyncio.sleep(self.rng.uniform(0.2, 0.5))

    async def unit_run(self) -> None:
        """A blocking run of the unit tests: the answer is the finished task."""
        await self.send("test-runner", UNIT_TESTS.format(commit=self.rng.choice(COMMITS)), blocking=True)

    async def suite_run(self) -> None:
        """A long run started without waiting, followed by polls or a subscription, perhaps canceled elsewhere."""
        task_id = await self.send("test-runner", FULL_SUITE.format(commit=self.rng.choice(COMMITS)), blocking=False)
        if task_id is None:
            return
        followers: list[Awaitable[Any]] = []
        if self.rng.random() < 0.5:
            followers.append(self.subscribe("test-runner", task_id))
        if self.rng.random() < 0.35:
            followers.append(self._cancel_later(task_id))
        followers.append(self.watch("test-runner", task_id, lambda s: s in TERMINAL_STATES))
        await asyncio.gather(*followers)

    async def _cancel_later(self, task_id: str) -> None:
        await asyncio.sleep(self.rng.uniform(0.0, 3.0))
        await self.cancel("test-runner", task_id, avoid=None)

    async def follow_up(self) -> None:
        """A first message that asks for input, then the follow-up (to another replica) that completes it."""
        task_id = await self.send("test-runner", ASK_COMMIT, blocking=True)
        if task_id is None:
            return
        state = await self.watch("test-runner", task_id, lambda s: s != "TASK_STATE_WORKING" and s != "TASK_STATE_SUBMITTED")
        if state != "TASK_STATE_INPUT_REQUIRED":
            return
        text = f"at commit {self.rng.choice(COMMITS)}"
        await self.send("test-runner", text, blocking=self.rng.random() < 0.5, task={"taskId": task_id})
        await self.watch("test-runner", task_id, lambda s: s in TERMINAL_STATES)

    async def deploy(self) -> None:
        """A staging deploy: wait for AUTH_REQUIRED, the operator approves on some replica, the rollout runs once."""
        build = f"{self.prefix}.{self.number}.{self.sequence + 1}"
        task_id = await self.send("deployer", f"Deploy build {build} to staging", blocking=False)
        if task_id is None:
            return
        state = await self.watch("deployer", task_id, lambda s: s == "TASK_STATE_AUTH_REQUIRED" or s in TERMINAL_STATES)
        if state != "TASK_STATE_AUTH_REQUIRED":
            return
        await self.approve(task_id)
        if self.rng.random() < 0.3:
            await self.subscribe("deployer", task_id)
        await self.watch("deployer", task_id, lambda s: s in TERMINAL_STATES)

    async def run(self) -> None:
        """Scenarios at random, each bounded in time, until `stop` is set."""
        scenarios: list[tuple[Callable[[], Awaitable[None]], float]] = [
            (self.unit_run, 3), (self.suite_run, 4), (self.follow_up, 2), (self.deploy, 2),
        ]
        functions, weights = zip(*scenarios)
        while not self.stop.is_set():
            scenario = self.rng.choices(functions, weights)[0]
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SCENARIO_DEADLINE):
                    await scenario()


def stream_broken(outcome: str, last: str) -> bool:
    """Whether a subscription should be made again: it broke (a transport error, an internal error) or ended before
    the task ended or came to wait for someone."""
    if outcome == "ok":
        return last not in TERMINAL_STATES | WAITING_STATES
    return outcome == "-32603" or not outcome.lstrip("-").isdigit()


async def run_clients(
    count: int, replicas: list[Replica], history: History, seed: int, stop: asyncio.Event, prefix: str
) -> None:
    """`count` clients until `stop` is set; each finishes its current scenario."""
    limits = httpx.Limits(max_connections=count * 4, max_keepalive_connections=count * 2)
    async with httpx.AsyncClient(limits=limits, trust_env=False) as http:
        clients = [
            Client(n, replicas, history, random.Random(f"{seed}-{n}"), http, stop, prefix) for n in range(count)
        ]
        await asyncio.gather(*(client.run() for client in clients))
