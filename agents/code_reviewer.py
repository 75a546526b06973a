"""code-reviewer: reviews a unified diff against a base branch, asking for the branch when it is not named, and
asking a user before posting the findings when the request says so."""

import re

from a2a.server.agent_execution import RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentProvider,
    AgentSkill,
    Message,
    Part,
    Role,
    Task,
    TaskState,
)

from a2a_bridge.agents.base import Emitter, KitAgent, data_part, user_texts
from a2a_bridge.core.task_status import WHO_MUST_ACT, who_must_act_extension

DIFF_TYPE = "text/x-diff"
ANSWER = (
    "I review unified diffs in Python, TypeScript and Go. "
    "Send the diff as a text/x-diff part and name the base branch."
)
ASK_BASE = "Which base branch should I compare this diff against?"
REVIEW_GATE = re.compile(r"\bask\s+([\w.@-]+)\s+before\s+posting\b", re.IGNORECASE)
"""'ask me before posting' or 'ask NAME before posting': a review step, which the task's responsible user answers
whatever name the text gives (who answers never comes from what the requester wrote)."""
POST_QUESTION = "Post these findings to the pull request?"
DECIDED = "review:"
"""The prefix of the signal that resumes a task with the reviewer's decision: review:post or review:discard."""

KNOWN_FINDINGS = [
    {
        "file": "payments/refunds.py",
        "line": 42,
        "severity": "high",
        "finding": "Partial refunds round the amount down before the fee is subtracted.",
    },
    {"file": "payments/refunds.py", "line": 57, "severity": "low", "finding": "The new branch has no test."},
]


def card() -> AgentCard:
    return AgentCard(
        name="code-reviewer",
        description="Reviews a unified diff against a base branch and returns findings with file and line.",
        provider=AgentProvider(url="https://review.example.com", organization="Developer Tools"),
        version="0.9.4",
        capabilities=AgentCapabilities(streaming=True, extensions=[who_must_act_extension()]),
        default_input_modes=["text/plain", DIFF_TYPE],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(
                id="review-diff",
                name="Review a diff",
                description="Compare a diff with its base branch and report risky changes.",
                tags=["review", "diff"],
                examples=["Review this diff of payments-api"],
                input_modes=[DIFF_TYPE, "text/plain"],
            ),
            AgentSkill(
                id="answer-question",
                name="Answer a review question",
                description="Answer a short question about what this reviewer checks.",
                tags=["review", "faq"],
            ),
        ],
    )


def find_diff(task: Task | None, message: Message | None) -> str | None:
    """The text of the first diff part the user sent on this task."""
    messages = list(task.history) if task is not None else []
    if message is not None:
        messages.append(message)
    for entry in messages:
        if entry.role != Role.ROLE_USER:
            continue
        for part in entry.parts:
            if part.media_type == DIFF_TYPE:
                return part.raw.decode("utf-8", "replace") if part.HasField("raw") else part.text
    return None


def named_base(texts: list[str]) -> str | None:
    """A base branch named as 'against X' or 'base branch X'."""
    for text in reversed(texts):
        match = re.search(r"(?:against|base(?: branch)?)\s+([\w./-]+)", text)
        if match:
            return match.group(1).rstrip(".")
    return None


def findings_for(diff: str) -> list[dict[str, object]]:
    if "payments/refunds.py" in diff:
        return KNOWN_FINDINGS
    file_match = re.search(r"^\+\+\+ b/(\S+)", diff, re.MULTILINE)
    line_match = re.search(r"^@@ -\d+(?:,\d+)? \+(\d+)", diff, re.MULTILINE)
    return [
        {
            "file": file_match.group(1) if file_match else "unknown",
            "line": int(line_match.group(1)) if line_match else 1,
            "severity": "low",
            "finding": "The new branch has no test.",
        }
    ]


def review_asked(texts: list[str]) -> bool:
    """Whether the request asks for a decision before the findings are posted."""
    return any(REVIEW_GATE.search(text) for text in texts)


REVIEW_REQUEST = {"actor": "user", "action": "review"}
"""The who-must-act entry of the review step: it names nobody, so the task's responsible user decides."""


def last_question(task: Task | None) -> str | None:
    """The agent's text just before the user's latest message: the question that message answers."""
    if task is None:
        return None
    for entry in reversed(task.history[:-1]):
        if entry.role == Role.ROLE_AGENT:
            return " ".join(p.text for p in entry.parts if p.text)
    return None


class CodeReviewer(KitAgent):
    """Answers questions directly; reviews diffs as tasks."""

    repeat_safe = True

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        out = self.emitter(event_queue, context)
        task = context.current_task
        diff = find_diff(task, context.message)
        signal = getattr(context, "signal", None) or ""
        if signal.startswith(DECIDED) and diff is not None:
            await self._decided(out, len(findings_for(diff)), signal.removeprefix(DECIDED))
            return
        if diff is None and task is None:
            await event_queue.enqueue_event(
                Message(
                    message_id=self.new_id(),
                    context_id=context.context_id or "",
                    role=Role.ROLE_AGENT,
                    parts=[Part(text=ANSWER)],
                )
            )
            return
        texts = user_texts(task, context.message)
        if diff is None:
            await out.status(TaskState.TASK_STATE_INPUT_REQUIRED, "Send the diff as a text/x-diff part.")
            return
        base = texts[-1].strip() if last_question(task) == ASK_BASE else named_base(texts)
        if not base:
            await out.status(TaskState.TASK_STATE_INPUT_REQUIRED, ASK_BASE)
            return
        await out.status(TaskState.TASK_STATE_WORKING, f"Comparing the diff against {base}")
        await self.step()
        findings = findings_for(diff)
        files = sorted({str(f["file"]) for f in findings})
        noun = "finding" if len(findings) == 1 else "findings"
        await out.artifact(
            "review",
            [
                Part(text=f"{len(findings)} {noun} in {', '.join(files)}"),
                data_part({"base": base, "findings": findings}),
            ],
            name="review.json",
            last_chunk=True,
        )
        if review_asked(texts):
            base_url = context.call_context.state.get("base_url", "") if context.call_context else ""
            await out.status(
                TaskState.TASK_STATE_AUTH_REQUIRED,
                f"{POST_QUESTION} Answer post or discard at {base_url}/tasks/{out.task_id}/review",
                {WHO_MUST_ACT: dict(REVIEW_REQUEST)},
            )
            return
        await out.status(TaskState.TASK_STATE_COMPLETED, f"{len(findings)} {noun}")

    async def _decided(self, out: Emitter, count: int, decision: str) -> None:
        """Post the findings or keep them off the pull request, as the reviewer decided."""
        noun = "finding" if count == 1 else "findings"
        if decision != "post":
            await out.status(TaskState.TASK_STATE_COMPLETED, f"{count} {noun}, not posted to the pull request")
            return
        await out.status(TaskState.TASK_STATE_WORKING, f"Posting {count} {noun} to the pull request")
        await self.step()
        await out.status(TaskState.TASK_STATE_COMPLETED, f"{count} {noun} posted to the pull request")
