"""The history of a run, as Jepsen keeps one: every operation a client invoked with its outcome, every task state a
client observed (which replica, when the request was sent and when the answer came), and every fault injected."""

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TERMINAL_STATES = frozenset({
    "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
})
WAITING_STATES = frozenset({"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"})


def now() -> float:
    """Seconds on the harness's monotonic clock (the only clock the history uses)."""
    return time.monotonic()


@dataclass
class Operation:
    """One request of a client: what it asked, of which replica, and how it ended."""

    client: int
    kind: str
    replica: str
    invoked: float
    completed: float
    message_id: str | None = None
    task_id: str | None = None
    outcome: str = "ok"
    """ok, an error code or the failure's class name."""
    detail: str = ""


@dataclass
class Observation:
    """A task state a client saw: `invoked` is when the request (or the stream) was sent, `observed` when it came."""

    task_id: str
    state: str
    replica: str
    source: str
    invoked: float
    observed: float
    stream: int | None = None
    """The stream it came on, for frames of one SubscribeToTask or streaming answer."""


@dataclass
class Fault:
    kind: str
    target: str
    started: float
    ended: float
    detail: str = ""


@dataclass
class Message:
    """A message a client sent: acknowledged once a replica answered with its task id."""

    message_id: str
    agent: str
    text: str
    task_id: str | None = None
    follow_up_of: str | None = None


@dataclass
class History:
    started: float = field(default_factory=now)
    operations: list[Operation] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    messages: dict[str, Message] = field(default_factory=dict)
    streams: int = 0

    def operation(self, op: Operation) -> None:
        self.operations.append(op)

    def observe(self, observation: Observation) -> None:
        self.observations.append(observation)

    def fault(self, fault: Fault) -> None:
        self.faults.append(fault)

    def sent(self, message: Message) -> None:
        self.messages.setdefault(message.message_id, message)

    def acknowledged(self, message_id: str, task_id: str) -> None:
        self.messages[message_id].task_id = task_id

    def next_stream(self) -> int:
        self.streams += 1
        return self.streams

    def task_agents(self) -> dict[str, str]:
        """Every acknowledged task id and the agent it belongs to."""
        return {m.task_id: m.agent for m in self.messages.values() if m.task_id is not None}

    def write(self, path: Path, extra: dict[str, Any]) -> None:
        """The history as JSON, times in seconds since the run started."""

        def shifted(item: Any) -> dict[str, Any]:
            row = asdict(item)
            for key in ("invoked", "completed", "observed", "started", "ended"):
                if key in row and isinstance(row[key], float):
                    row[key] = round(row[key] - self.started, 4)
            return row

        document = {
            "messages": [asdict(m) for m in self.messages.values()],
            "operations": [shifted(o) for o in self.operations],
            "observations": [shifted(o) for o in self.observations],
            "faults": [shifted(f) for f in self.faults],
            **extra,
        }
        path.write_text(json.dumps(document, indent=1))
