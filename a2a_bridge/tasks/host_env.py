"""What every part of one agent's task host shares: its settings, stores, clock and ids, this process's session,
the change signals status polls wait on, and the background jobs the host owns."""

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from a2a.server.agent_execution import AgentExecutor
from a2a.server.tasks import PushNotificationConfigStore, TaskStore
from a2a.types import Message

from a2a_bridge.core import claims
from a2a_bridge.core.clock import Clock
from a2a_bridge.core.config import Limits
from a2a_bridge.push.attempts import RetrySchedule
from a2a_bridge.push.outbox import Outbox
from a2a_bridge.store.ledger import Ledger
from a2a_bridge.store.store_faults import STORE_GRACE

ReplyHook = Callable[[str, str, Message], Coroutine[Any, Any, None]]
"""Called with (owner, messageId, reply) when an agent answers a message directly, before the caller sees it."""


@dataclass
class HostSettings:
    """How a host runs turns: its lease, the inactivity lifespan, and whether its agent's work may repeat."""

    lease: timedelta = claims.DEFAULT_LEASE
    idle_lifespan: timedelta | None = None
    repeat_safe: bool = True
    store_grace: float = STORE_GRACE
    """Seconds a caller waits for a write the store refuses before it is told the store is unavailable."""
    max_task_bytes: int = Limits.max_task_bytes
    """The most a task's history, artifacts and metadata may hold, in bytes of its stored form."""
    webhook_retries: RetrySchedule = field(default_factory=RetrySchedule)
    """When a failing push notification is tried again, and when it is given up (a dead letter)."""


@dataclass(eq=False)
class HostEnv:
    """One agent's executor, stores, clock and ids, shared by the parts of its task host."""

    agent: str
    executor: AgentExecutor
    store: TaskStore
    ledger: Ledger
    push_store: PushNotificationConfigStore | None
    push: Outbox | None
    clock: Clock
    new_id: Callable[[], str]
    settings: HostSettings
    session: int = 0
    """This process's session generation, taken at start."""
    deadlines: dict[str, datetime] = field(default_factory=dict)
    """The idle deadline of each task parked in an idle phase (with an inactivity lifespan)."""
    changes: dict[str, asyncio.Event] = field(default_factory=dict)
    background: set[asyncio.Future[Any]] = field(default_factory=set)
    on_reply: ReplyHook | None = None

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        """Run a job the host owns (awaited or canceled when it stops)."""
        job = asyncio.ensure_future(coroutine)
        self.background.add(job)
        job.add_done_callback(self.background.discard)
        return job

    def changed(self, task_id: str) -> asyncio.Event:
        """An event set at the task's next change (its revision moves)."""
        return self.changes.setdefault(task_id, asyncio.Event())

    def signal_change(self, task_id: str) -> None:
        change = self.changes.pop(task_id, None)
        if change is not None:
            change.set()
