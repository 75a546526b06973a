"""deployer: deploys a tagged build to staging once an operator approves, or to preview once the responsible user
has connected the providers it acts through; refuses production."""

import re
from collections.abc import Callable
from typing import Any

from a2a.server.agent_execution import RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from a2a_bridge.agents.base import Emitter, KitAgent, data_part, user_texts
from a2a_bridge.core.task_status import WHO_MUST_ACT, who_must_act_extension

APPROVED = "approved"
AUTHORIZED = "authorized:"
"""The prefix of the signal that resumes a preview deploy once the user connected a provider: authorized:PROVIDER."""
ROLLOUT_WINDOW_SECONDS = 600
"""The operation window a rollout opens on its claim: a deploy may take longer than one lease."""
REFUSAL = "Production deploys are outside this agent's policy. Use the release train."
OPERATOR_APPROVAL = {"actor": "operator", "action": "approve"}


def preview_sign_ins(build: str) -> list[dict[str, str]]:
    """What a preview deploy does as the responsible user: two operations through cloud-console, one through github."""
    operations = [
        ("cloud-console", f"upload build {build}"),
        ("cloud-console", "open the preview URL"),
        ("github", "post the preview link"),
    ]
    return [
        {"actor": "user", "action": "authorize_provider", "provider": provider, "operation": operation}
        for provider, operation in operations
    ]


def sign_in_text(sign_ins: list[dict[str, str]], base: str, task_id: str) -> str:
    """Which providers to connect, for which operations, and where."""
    operations: dict[str, list[str]] = {}
    for entry in sign_ins:
        operations.setdefault(entry["provider"], []).append(entry["operation"])
    wanted = " and to ".join(f"{provider} (to {' and '.join(ops)})" for provider, ops in operations.items())
    return f"Sign in to {wanted}: authorize each provider at {base}/tasks/{task_id}/authorize"


def providers_waiting(task: Task | None) -> set[str]:
    """The providers of the latest sign-in request on this task: its status message, else the newest in history."""
    if task is None:
        return set()
    messages = [task.status.message] if task.status.HasField("message") else []
    for message in [*messages, *reversed(task.history)]:
        if WHO_MUST_ACT not in message.metadata:
            continue
        raw: Any = MessageToDict(message.metadata).get(WHO_MUST_ACT)
        entries = raw if isinstance(raw, list) else [raw]
        providers = {
            str(e["provider"])
            for e in entries
            if isinstance(e, dict) and e.get("action") == "authorize_provider" and "provider" in e
        }
        if providers:
            return providers
    return set()


def card() -> AgentCard:
    requirement = SecurityRequirement()
    requirement.schemes["bearer"].CopyFrom(StringList())
    return AgentCard(
        name="deployer",
        description="Deploys a tagged build to staging after an operator approves it.",
        provider=AgentProvider(url="https://deploy.example.com", organization="Platform Team"),
        version="1.4.1",
        capabilities=AgentCapabilities(streaming=True, extended_agent_card=True, extensions=[who_must_act_extension()]),
        security_schemes={
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    description="A token issued by the platform team.", scheme="Bearer"
                )
            )
        },
        security_requirements=[requirement],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(
                id="deploy",
                name="Deploy a build",
                description="Deploy one tagged build to staging, with operator approval.",
                tags=["deploy", "staging"],
                examples=["Deploy build 2026.10.06-1 to staging"],
            )
        ],
    )


def extended_card() -> AgentCard:
    extended = card()
    extended.skills.add(
        id="rollback",
        name="Roll back a deploy",
        description="Return staging to the previous build. Shown only to authenticated callers.",
        tags=["deploy", "rollback"],
    )
    return extended


class Deployer(KitAgent):
    """Waits in AUTH_REQUIRED for an operator's approval (staging) or the user's sign-ins (preview), then rolls out;
    a deploy is never repeated."""

    repeat_safe = False

    def __init__(self, *args: object, record: Callable[[str, str], None] | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.record = record or (lambda task_id, build: None)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        out = self.emitter(event_queue, context)
        texts = user_texts(context.current_task, context.message)
        build = next((m.group(1) for t in texts if (m := re.search(r"build\s+(\S+)", t))), None)
        signal = getattr(context, "signal", None) or ""
        base = context.call_context.state.get("base_url", "") if context.call_context else ""
        if signal.startswith(AUTHORIZED) and build is not None:
            waiting = providers_waiting(context.current_task) - {signal.removeprefix(AUTHORIZED)}
            sign_ins = [entry for entry in preview_sign_ins(build) if entry["provider"] in waiting]
            if sign_ins:
                await self._ask_sign_in(out, sign_ins, base)
                return
            await out.status(TaskState.TASK_STATE_WORKING, f"Signed in as you. Rolling out build {build} to preview")
            await self._roll_out(out, build, "preview", f"https://preview.example.com/{build}", context)
            return
        if signal == APPROVED and build is not None:
            await out.status(TaskState.TASK_STATE_WORKING, "Approved by an operator. Rolling out to staging")
            await self._roll_out(out, build, "staging", "https://staging.example.com", context)
            return
        if any("production" in t.lower() for t in texts):
            await out.status(TaskState.TASK_STATE_REJECTED, REFUSAL)
            return
        if build is None:
            await out.status(TaskState.TASK_STATE_INPUT_REQUIRED, "Which build should I deploy?")
            return
        preview = any(re.search(r"\bpreview\b", t, re.IGNORECASE) for t in texts)
        environment = "preview" if preview else "staging"
        await out.status(TaskState.TASK_STATE_WORKING, f"Preparing build {build} for {environment}")
        await self.step()
        if preview:
            await self._ask_sign_in(out, preview_sign_ins(build), base)
            return
        await out.status(
            TaskState.TASK_STATE_AUTH_REQUIRED,
            f"An operator must approve this deploy at {base}/approve/{out.task_id}",
            {WHO_MUST_ACT: OPERATOR_APPROVAL},
        )

    async def _ask_sign_in(self, out: Emitter, sign_ins: list[dict[str, str]], base: str) -> None:
        """Wait in AUTH_REQUIRED for the responsible user to authorize the providers these operations act through."""
        text = sign_in_text(sign_ins, base, out.task_id)
        await out.status(TaskState.TASK_STATE_AUTH_REQUIRED, text, {WHO_MUST_ACT: sign_ins})

    async def _roll_out(self, out: Emitter, build: str, environment: str, url: str, context: RequestContext) -> None:
        """Roll the build out under an operation window, the claim's lease for this long step."""
        open_window = getattr(context, "open_window", None)
        if open_window is not None:
            await open_window("rollout", ROLLOUT_WINDOW_SECONDS)
        await self.step()
        self.record(out.task_id, build)
        await out.artifact(
            "deploy-report",
            [data_part({"environment": environment, "build": build, "url": url, "healthChecks": "3 of 3 passing"})],
            name="deploy-report.json",
            last_chunk=True,
        )
        await out.status(TaskState.TASK_STATE_COMPLETED, f"Build {build} is live on {environment}")
