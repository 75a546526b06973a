"""`a2a-bridge plan`: the capture kit's planner, a client agent on the SDK's client. It reads the three cards, picks
an agent for each skill, delegates, and acts on every state a task reaches: it waits (blocking send), answers an
input request from its own context, subscribes while an operator approves, and stops at a terminal state. It prints
its decisions in the shape of the kit's `19-planner.log`."""

import argparse
import asyncio
import re
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.client import (
    A2ACardResolver,
    AuthInterceptor,
    Client,
    ClientCallContext,
    ClientCallInterceptor,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.types import (
    AgentCard,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.client.errors import AgentCardResolutionError
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from a2a_bridge.capture.kit import KIT_PORTS
from a2a_bridge.core.arg_types import http_url, positive_seconds
from a2a_bridge.tasks.delegation import ON_BEHALF_OF

SKILLS = ("run-tests", "review-diff", "deploy")
AGENTS = ("test-runner", "code-reviewer", "deployer")
TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
MAX_TURNS = 5
"""How many times the planner acts on one task before it gives up on it."""
TURN_TIMEOUT = 120.0
"""Seconds a blocking send may take before the planner gives up on it."""
APPROVAL_URL = re.compile(r"https?://\S+/approve/[\w-]+")
DIFF_TYPE = "text/x-diff"
DIFF = (
    "--- a/payments/charges.py\n"
    "+++ b/payments/charges.py\n"
    "@@ -18,3 +18,6 @@ def capture(charge):\n"
    "     if charge.captured:\n"
    "         return charge\n"
    "+    if charge.amount == 0:\n"
    "+        charge.captured = True\n"
    "+        return charge\n"
)
"""The change the planner has reviewed: a new branch without a test, which the reviewer reports as one low finding."""


class NoCard(Exception):
    """An agent's card could not be read, so the planner cannot start."""


@dataclass(frozen=True)
class PlanContext:
    """What the planner knows: what it asks each agent for, and what it answers when an agent asks."""

    repository: str = "payments-api"
    commit: str = "4e1c2b7"
    diff: str = DIFF
    base_branch: str = "main"
    build: str = "2026.10.06-1"
    environment: str = "staging"

    def request(self, skill: str) -> list[Part]:
        if skill == "run-tests":
            return [Part(text=f"Run the unit tests for {self.repository} at commit {self.commit}")]
        if skill == "review-diff":
            return [
                Part(text=f"Review this diff of {self.repository}"),
                Part(raw=self.diff.encode(), media_type=DIFF_TYPE, filename="change.diff"),
            ]
        return [Part(text=f"Deploy build {self.build} to {self.environment}")]

    def answer(self, question: str) -> str | None:
        """The answer to an agent's question from the planner's own context, or None when it has none."""
        asked = question.lower()
        for topic, answer in (("branch", self.base_branch), ("commit", self.commit), ("build", self.build)):
            if topic in asked:
                return answer
        return None


class BearerToken(CredentialService):
    """One bearer token, offered for every scheme a card names; the SDK's AuthInterceptor applies it to HTTP bearer
    schemes only."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def get_credentials(self, security_scheme_name: str, context: ClientCallContext | None) -> str | None:
        return self.token


@dataclass
class Agent:
    """A card the planner read, and the clients it talks to that agent through."""

    card: AgentCard
    blocking: Client
    streaming: Client

    @property
    def name(self) -> str:
        return self.card.name

    def skills(self) -> list[str]:
        return [skill.id for skill in self.card.skills]

    def jsonrpc_url(self) -> str:
        return next((i.url for i in self.card.supported_interfaces if i.protocol_binding == "JSONRPC"), "none")


def random_message_id() -> str:
    return str(uuid.uuid4())


@dataclass
class Planner:
    """Delegates the plan's skills and reports each decision through `say`. It prints no time and no id of its own
    (only the first 8 characters of the server's task ids), time only bounds its waits (the approval and turn
    timeouts), and the message ids it sends come from `message_id`: given seeded ids and a deterministic server, two
    runs send and print the same."""

    http: httpx.AsyncClient
    say: Callable[[str], None]
    context: PlanContext = field(default_factory=PlanContext)
    approve: bool = False
    operator_token: str | None = None
    approval_timeout: float = 300.0
    interceptors: list[ClientCallInterceptor] = field(default_factory=list)
    message_id: Callable[[], str] = random_message_id
    on_behalf_of: str | None = None
    """The parent task (`<agent>/<task id>`) the planner works on for a person, as an agent principal: the first
    message of each delegation names it, so that each task is that person's (docs/security.md, "Delegation")."""

    async def read_card(self, base: str) -> Agent:
        try:
            card = await A2ACardResolver(self.http, base).get_agent_card()
        except AgentCardResolutionError as error:
            raise NoCard(first_line(error)) from None
        blocking = ClientFactory(ClientConfig(streaming=False, httpx_client=self.http)).create(card, self.interceptors)
        streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=self.http)).create(card, self.interceptors)
        agent = Agent(card, blocking, streaming)
        self.say(f"card {agent.name}: skills {', '.join(agent.skills())}; JSONRPC at {agent.jsonrpc_url()}")
        return agent

    async def run(self, bases: list[str]) -> bool:
        """Read the cards, delegate each skill in turn; True when every delegated task completed."""
        agents = [await self.read_card(base) for base in bases]
        results: dict[str, Task | None] = {}
        for skill in SKILLS:
            agent = next((a for a in agents if skill in a.skills()), None)
            if agent is None:
                self.say(f"no card offers {skill}, so the planner stops")
                return False
            if skill == "deploy" and (reason := hold_deploy(results)):
                self.say(f"deploy: not delegated, because {reason}")
                return False
            self.say(f"delegate {skill} to {agent.name}")
            try:
                results[skill] = await self.delegate(agent, skill)
            except (A2AError, httpx.HTTPError, TimeoutError) as error:
                self.say(f"  the call failed: {first_line(error)}")
                results[skill] = None
            self.say(report(skill, results[skill]))
        return all(
            task is not None and task.status.state == TaskState.TASK_STATE_COMPLETED for task in results.values()
        )

    async def delegate(self, agent: Agent, skill: str) -> Task:
        """Send the skill's request and act on each state the task reaches, until it ends or the planner cannot act."""
        task = await self.send(agent, self.context.request(skill))
        for _ in range(MAX_TURNS):
            state = task.status.state
            self.say(f"  task {task.id[:8]} is {TaskState.Name(state)}")
            if state in TERMINAL:
                return task
            if state == TaskState.TASK_STATE_INPUT_REQUIRED:
                question = status_text(task)
                answer = self.context.answer(question)
                if answer is None:
                    self.say(f"  it asks: {question} The planner has no answer in its context, so it stops.")
                    return task
                self.say(f"  it asks: {question} The planner answers from its own context: {answer}")
                task = await self.send(agent, [Part(text=answer)], task)
                continue
            task, ended = await self.follow(agent, task)
            if not ended or task.status.state in TERMINAL:
                return task
        return task

    async def send(self, agent: Agent, parts: list[Part], task: Task | None = None) -> Task:
        """A blocking SendMessage: the reply comes once the task is terminal or interrupted."""
        message = Message(message_id=self.message_id(), role=Role.ROLE_USER, parts=parts)
        if task is not None:
            message.task_id, message.context_id = task.id, task.context_id
        elif self.on_behalf_of:
            message.metadata.update({ON_BEHALF_OF: {"parentTask": self.on_behalf_of}})
        async with asyncio.timeout(TURN_TIMEOUT):
            replies = [reply async for reply in agent.blocking.send_message(SendMessageRequest(message=message))]
        if not replies or not replies[-1].HasField("task"):
            raise A2AError(f"{agent.name} answered with a message, not a task")
        return replies[-1].task

    async def follow(self, agent: Agent, task: Task) -> tuple[Task, bool]:
        """Subscribe to a task that waits for someone else (an operator's approval) or still works, and wait on the
        stream until the server ends it (at a terminal or input-required state); the task as it is then, and whether
        the stream ended before the approval timeout."""
        state: int = task.status.state
        told = False
        ended = True
        try:
            async with asyncio.timeout(self.approval_timeout):
                async for event in agent.streaming.subscribe(SubscribeToTaskRequest(id=task.id)):
                    state = event_state(event, state)
                    if not told:
                        told = True
                        await self.ask_for_help(task)
        except TimeoutError:
            ended = False
            self.say(f"  nobody acted within {self.approval_timeout:g} s, so the planner stops waiting.")
        except A2AError as refused:
            ended = False
            self.say(f"  the subscription was refused ({first_line(refused)}), so the planner reads the task instead.")
        if not told:
            await self.ask_for_help(task)
        if ended:
            self.say(f"  the stream ends at {TaskState.Name(state)}")
        return await agent.blocking.get_task(GetTaskRequest(id=task.id)), ended

    async def ask_for_help(self, task: Task) -> None:
        """Say why the planner waits; with --approve, act as the operator by opening the approval link."""
        if task.status.state != TaskState.TASK_STATE_AUTH_REQUIRED:
            self.say("  it is still working, so the planner subscribes.")
            return
        request = status_text(task)
        self.say(f"  it needs approval: {request} The planner cannot approve, so it asks the operator and subscribes.")
        link = APPROVAL_URL.search(request)
        if self.approve and link:
            headers = {"Authorization": f"Bearer {self.operator_token}"} if self.operator_token else {}
            response = await self.http.post(link.group(0), json={}, headers=headers)
            self.say(
                f"  as a demo (--approve), the planner plays the operator: POST {link.group(0)} answered"
                f" {response.status_code}"
            )


def first_line(error: BaseException) -> str:
    """The error's first line, with the fields an invalid-parameters error names (as `field: why`)."""
    line = str(error).splitlines()[0] if str(error) else type(error).__name__
    data = getattr(error, "data", None)
    violations = data.get("errors") if isinstance(data, dict) else None
    if isinstance(violations, list):
        named = [f"{v.get('field')}: {v.get('message')}" for v in violations if isinstance(v, dict)]
        line = f"{line} ({'; '.join(named)})" if named else line
    return line


def status_text(task: Task) -> str:
    return " ".join(part.text for part in task.status.message.parts if part.text)


def event_state(event: StreamResponse, state: int) -> int:
    """The task's state after one stream event."""
    if event.HasField("task"):
        return event.task.status.state
    if event.HasField("status_update"):
        return event.status_update.status.state
    return state


def artifact_data(task: Task, artifact_id: str) -> dict[str, Any]:
    """The first data part of an artifact, as a dict ({} when there is none)."""
    for artifact in task.artifacts:
        if artifact.artifact_id == artifact_id:
            for part in artifact.parts:
                if part.HasField("data"):
                    value = MessageToDict(part.data)
                    return value if isinstance(value, dict) else {}
    return {}


def report(skill: str, task: Task | None) -> str:
    """The result line of one delegation."""
    label = {"run-tests": "tests", "review-diff": "review", "deploy": "deploy"}[skill]
    if task is None:
        return f"{label}: not done"
    if task.status.state != TaskState.TASK_STATE_COMPLETED or skill == "deploy":
        return f"{label}: {TaskState.Name(task.status.state)}"
    if skill == "run-tests":
        summary = artifact_data(task, "summary")
        passed, failed = int(summary.get("passed", 0)), int(summary.get("failed", 0))
        return f"tests: {failed} failed, {passed} passed" if failed else f"tests: {passed} passed"
    findings = artifact_data(task, "review").get("findings", [])
    blocking = sum(1 for finding in findings if finding.get("severity") == "high")
    return f"review: {len(findings)} finding{'' if len(findings) == 1 else 's'}, {blocking} blocking"


def hold_deploy(results: dict[str, Task | None]) -> str | None:
    """Why the planner does not deploy: tests that did not pass or a review with blocking findings; None to deploy."""
    tests, review = results.get("run-tests"), results.get("review-diff")
    if tests is None or tests.status.state != TaskState.TASK_STATE_COMPLETED:
        return "the tests did not run to completion"
    if int(artifact_data(tests, "summary").get("failed", 0)):
        return "tests failed"
    if review is None or review.status.state != TaskState.TASK_STATE_COMPLETED:
        return "the review did not complete"
    if any(f.get("severity") == "high" for f in artifact_data(review, "review").get("findings", [])):
        return "the review has blocking findings"
    return None


def agent_bases(url: str, kit_host: str | None) -> list[str]:
    """Where each agent's card is: under the bridge's URL, or at the root of each kit port on `kit_host`."""
    if kit_host:

        return [f"http://{kit_host}:{KIT_PORTS[name]}" for name in AGENTS]
    return [f"{url.rstrip('/')}/{name}" for name in AGENTS]


async def plan(args: argparse.Namespace, say: Callable[[str], None]) -> bool:
    principal = args.principal_token
    card_token = args.token if not principal else None
    interceptors: list[ClientCallInterceptor] = [AuthInterceptor(BearerToken(card_token))] if card_token else []
    headers = {"Authorization": f"Bearer {principal}"} if principal else {}
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0, read=None), headers=headers) as http:
        planner = Planner(
            http, say, approve=args.approve, operator_token=args.operator_token,
            approval_timeout=args.approval_timeout, interceptors=interceptors, on_behalf_of=args.on_behalf_of,
        )
        return await planner.run(agent_bases(args.url, args.kit_host))


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add `plan` to the a2a-bridge command."""
    command = commands.add_parser("plan", help="run the kit's planner against the three agents and print its log")
    command.add_argument(
        "--url", type=http_url, default="http://127.0.0.1:8000",
        help="the bridge; cards at URL/{agent}/.well-known/agent-card.json",
    )
    command.add_argument("--kit-host", metavar="HOST", help="read the cards at the root of each kit port on HOST")
    command.add_argument("--token", metavar="DEPLOYER_TOKEN", help="bearer token for agents whose card asks for one")
    command.add_argument(
        "--principal-token", metavar="TOKEN",
        help="the planner's own bearer token (an agent principal), sent to every agent instead of --token",
    )
    command.add_argument(
        "--on-behalf-of", metavar="AGENT/TASK_ID",
        help="as an agent principal, create each task for the person whose task this is (the parent task)",
    )
    command.add_argument("--operator-token", metavar="T", help="bearer token sent with --approve's approval request")
    command.add_argument("--approve", action="store_true", help="as a demo, approve the deploy as the operator")
    command.add_argument(
        "--approval-timeout", type=positive_seconds, default=300.0, metavar="SECONDS",
        help="how long to wait for an approval",
    )
    command.set_defaults(run=main, log_level="warning")


def main(args: argparse.Namespace) -> int:
    """Run `a2a-bridge plan`; 0 when every delegated task completed, 1 when one did not, 2 when a card is unreadable."""
    try:
        return 0 if asyncio.run(plan(args, lambda line: print(line, flush=True))) else 1
    except NoCard as error:
        print(f"a2a-bridge plan: {error}", file=sys.stderr)
        return 2
