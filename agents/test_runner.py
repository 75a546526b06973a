"""test-runner: checks out a commit, runs its suite, and streams the log in chunks."""

import re

from a2a.server.agent_execution import RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentProvider,
    AgentSkill,
    Part,
    TaskState,
)

from a2a_bridge.agents.base import Emitter, KitAgent, data_part, user_texts
from a2a_bridge.core.task_status import who_must_act_extension

MISSING_COMMIT = "deadbee"

FAILING_RUN = {
    "log": [
        "collected 12 items\n",
        "tests/test_charges.py ........  [ 66%]\n",
        "tests/test_refunds.py ..F.  [100%]\n",
        "FAILED tests/test_refunds.py::test_partial_refund - AssertionError: 450 != 500\n",
        "1 failed, 11 passed in 4.21s\n",
    ],
    "summary": {
        "passed": 11,
        "failed": 1,
        "failures": [{"test": "tests/test_refunds.py::test_partial_refund", "error": "AssertionError: 450 != 500"}],
    },
    "verdict": "1 failed, 11 passed",
}

PASSING_RUN = {
    "log": [
        "collected 13 items\n",
        "tests/test_charges.py ........  [ 61%]\n",
        "tests/test_refunds.py .....  [100%]\n",
        "13 passed in 3.87s\n",
    ],
    "summary": {"passed": 13, "failed": 0, "failures": []},
    "verdict": "13 passed",
}

FAILING_COMMITS = {"9f3c2e1"}
FULL_SUITE_FILES = 8


def card() -> AgentCard:
    return AgentCard(
        name="test-runner",
        description="Checks out a commit, runs its test suite in a clean container, and streams the log.",
        provider=AgentProvider(url="https://ci.example.com", organization="Platform Team"),
        version="2.3.0",
        capabilities=AgentCapabilities(streaming=True, push_notifications=True, extensions=[who_must_act_extension()]),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(
                id="run-tests",
                name="Run tests",
                description="Run the test suite of a repository at one commit and report each failure with its log.",
                tags=["ci", "tests"],
                examples=["Run the unit tests for payments-api at commit 9f3c2e1"],
            )
        ],
    )


class TestRunner(KitAgent):
    """Runs the unit tests (or the full suite) of payments-api at a commit."""

    repeat_safe = True

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        out = self.emitter(event_queue, context)
        texts = user_texts(context.current_task, context.message)
        commit = next((m.group(1) for t in reversed(texts) if (m := re.search(r"commit\s+([0-9a-f]{4,40})", t))), None)
        if commit is None:
            await out.status(TaskState.TASK_STATE_INPUT_REQUIRED, "Which commit should I test?")
            return
        if commit == MISSING_COMMIT:
            await out.status(TaskState.TASK_STATE_WORKING, f"Checking out {commit}")
            await self.step()
            await out.status(TaskState.TASK_STATE_FAILED, f"Commit {commit} does not exist in payments-api.")
            return
        await out.status(TaskState.TASK_STATE_WORKING, f"Checking out {commit} and starting the suite")
        if any("full suite" in t for t in texts):
            await self._full_suite(out)
            return
        run = FAILING_RUN if commit in FAILING_COMMITS else PASSING_RUN
        lines = run["log"]
        for index, line in enumerate(lines):
            await out.artifact(
                "test-log",
                [Part(text=line)],
                name="test-log.txt" if index == 0 else None,
                append=index > 0,
                last_chunk=index == len(lines) - 1,
            )
            if index == 0:
                await self.step()
        await out.artifact("summary", [data_part(run["summary"])], name="summary.json", last_chunk=True)
        await out.status(TaskState.TASK_STATE_COMPLETED, run["verdict"])

    async def _full_suite(self, out: Emitter) -> None:
        for number in range(1, FULL_SUITE_FILES + 1):
            await self.step()
            await out.artifact(
                "test-log",
                [Part(text=f"tests/test_suite_{number:02d}.py ........\n")],
                name="test-log.txt" if number == 1 else None,
                append=number > 1,
                last_chunk=number == FULL_SUITE_FILES,
            )
        await out.status(TaskState.TASK_STATE_COMPLETED, f"{FULL_SUITE_FILES * 12} passed")
