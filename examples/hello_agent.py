"""hello: the agent docs/your-agent.md writes from scratch. Serve it from the checkout with

    .venv/bin/a2a-bridge serve --agent examples.hello_agent:agent

It greets whoever writes to it: `WORKING`, a `greeting` artifact, `COMPLETED`. A message that says "ask me first"
waits in `AUTH_REQUIRED` for the user's review (`POST /hello/tasks/{id}/review` with `{"decision": "post"}` or
`{"decision": "discard"}`) before it greets. A greeting may be run again after a crash, so the agent is repeat-safe.
"""

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Part, Task, TaskState, TaskStatus

from a2a_bridge import REVIEW, WHO_MUST_ACT, Agent, open_window, resume_signal, who_must_act_extension

COMPOSE_SECONDS = 120
"""The operation window of the composing step: the claim is held this long however short the bridge's lease."""


def card() -> AgentCard:
    """What callers read at /hello/.well-known/agent-card.json (the bridge adds the interfaces)."""
    return AgentCard(
        name="hello",
        description="Greets whoever writes to it, after their review when they ask for one.",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True, extensions=[who_must_act_extension()]),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="greet",
                name="Greet",
                description="Answers a name with a greeting; 'ask me first' to review it before it is sent.",
                tags=["example"],
                examples=["Ada", "Ada, ask me first"],
            )
        ],
    )


def first_text(context: RequestContext) -> str:
    """The text of the message that started the task (the current message, on its first turn)."""
    task = context.current_task
    message = task.history[0] if task is not None and task.history else context.message
    return " ".join(part.text for part in message.parts if part.text) if message is not None else ""


def new_task(context: RequestContext) -> Task:
    """A new task's first event: the stock SDK's server accepts no other (`InvalidAgentResponseError`); the bridge
    merges it into the task it has created, so the executor runs on either."""
    assert context.message is not None
    return Task(
        id=context.task_id or "",
        context_id=context.context_id or "",
        status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
        history=[context.message],
    )


class Hello(AgentExecutor):
    """An ordinary a2a-sdk AgentExecutor, which also reads the signal that resumed its turn and opens an operation
    window for its long step."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        if context.current_task is None:
            await event_queue.enqueue_event(new_task(context))
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        text = first_text(context)
        name = text.split(",")[0].strip() or "world"
        signal = resume_signal(context)
        if signal == "review:discard":
            await updater.complete(updater.new_agent_message([Part(text="Not sent.")]))
            return
        if "ask me first" in text.lower() and signal != "review:post":
            question = updater.new_agent_message(
                [Part(text=f"Send 'Hello, {name}!'? Answer post or discard at tasks/{context.task_id}/review")]
            )
            question.metadata.update({WHO_MUST_ACT: {"actor": "user", "action": "review"}})
            await updater.requires_auth(question)
            return
        await updater.start_work()
        await open_window(context, "compose", COMPOSE_SECONDS)
        await updater.add_artifact([Part(text=f"Hello, {name}!")], name="greeting", last_chunk=True)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


agent = Agent("hello", card(), Hello(), repeat_safe=True, actions=(REVIEW,))
