"""A small pool of long-lived workers taking queued jobs in turn (the outbox's delivery runs): a job costs no task of
its own, and a worker that finds the next job queued when it is done takes it at once, with no wake-up."""

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

Job = TypeVar("Job")


class Workers(Generic[Job]):
    """At most `most` tasks, each awaiting `work` on the queued jobs in turn, and waiting while none is queued."""

    def __init__(self, work: Callable[[Job], Awaitable[None]], most: int) -> None:
        self._work = work
        self._most = most
        self._queue: collections.deque[Job] = collections.deque()
        self._tasks: list[asyncio.Task[None]] = []
        self._idle: list[asyncio.Future[None]] = []
        """The wake-ups of the workers waiting for a job."""
        self._stopped = False

    def put(self, job: Job) -> None:
        """Queue a job: a waiting worker is woken for it, else one started while fewer than `most` run."""
        self._queue.append(job)
        if self._idle:
            self._idle.pop().set_result(None)
        elif len(self._tasks) < self._most and not self._stopped:
            self._tasks.append(asyncio.get_running_loop().create_task(self._run()))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while self._queue:
                try:
                    await self._work(self._queue.popleft())
                except Exception:  # noqa: BLE001 - the job's own failure: the worker goes on with the next
                    log.exception("a queued job failed")
            if self._stopped:
                return
            wake: asyncio.Future[None] = loop.create_future()
            self._idle.append(wake)
            await wake

    async def stop(self, grace: float) -> None:
        """Take no more jobs (those queued are dropped); the jobs under way get `grace` seconds, then are canceled."""
        self._stopped = True
        self._queue.clear()
        for idle in self._idle:
            idle.cancel()
        self._idle.clear()
        if self._tasks:
            _, late = await asyncio.wait(self._tasks, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
