"""deployer: deploys a tagged build to staging once an operator approves; refuses production."""

import re
from collections.abc import Callable

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
    TaskState,
)

from agents.base import KitAgent, data_part, user_texts

APPROVED = "approved"
REFUSAL = "Production deploys are outside this agent's policy. Use the release train."


def card() -> AgentCard:
    requirement = SecurityRequirement()
    requirement.schemes["bearer"].CopyFrom(StringList())
    return AgentCard(
        name="deployer",
        description="Deploys a tagged build to staging after an operator approves it.",
        provider=AgentProvider(url="https://deploy.example.com", organization="Platform Team"),
        version="1.4.1",
        capabilities=AgentCapabilities(streaming=True, extended_agent_card=True),
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
    """Waits in AUTH_REQUIRED for an operator's approval, then rolls out; a deploy is never repeated."""

    repeat_safe = False

    def __init__(self, *args: object, record: Callable[[str, str], None] | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.record = record or (lambda task_id, build: None)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        out = self.emitter(event_queue, context)
        texts = user_texts(context.current_task, context.message)
        build = next((m.group(1) for t in texts if (m := re.search(r"build\s+(\S+)", t))), None)
        if getattr(context, "signal", None) == APPROVED and build is not None:
            await out.status(TaskState.TASK_STATE_WORKING, "Approved by an operator. Rolling out to staging")
            await self.step()
            self.record(out.task_id, build)
            await out.artifact(
                "deploy-report",
                [
                    data_part(
                        {
                            "environment": "staging",
                            "build": build,
                            "url": "https://staging.example.com",
                            "healthChecks": "3 of 3 passing",
                        }
                    )
                ],
                name="deploy-report.json",
                last_chunk=True,
            )
            await out.status(TaskState.TASK_STATE_COMPLETED, f"Build {build} is live on staging")
            return
        if any("production" in t.lower() for t in texts):
            await out.status(TaskState.TASK_STATE_REJECTED, REFUSAL)
            return
        if build is None:
            await out.status(TaskState.TASK_STATE_INPUT_REQUIRED, "Which build should I deploy?")
            return
        await out.status(TaskState.TASK_STATE_WORKING, f"Preparing build {build} for staging")
        await self.step()
        base = context.call_context.state.get("base_url", "") if context.call_context else ""
        await out.status(
            TaskState.TASK_STATE_AUTH_REQUIRED,
            f"An operator must approve this deploy at {base}/approve/{out.task_id}",
        )
