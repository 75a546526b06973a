"""Store faults: which failures of a write are worth retrying (the store is down or full) and which are not (the
content cannot be stored), the backoff between retries, the outage as this process logs it (a line when it begins, a
line when it ends), and the watch that notices a SQLite file taken away."""

import asyncio
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

from a2a.utils.errors import A2AError, InternalError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_FIRST = 0.05
BACKOFF_MAX = 2.0
"""Seconds between retries of a kept write: doubling from the first to the most."""
STORE_GRACE = 5.0
"""Seconds a caller waits for a write the store refuses before it is told the store is unavailable."""
FILE_CHECK = 1.0
"""Seconds between checks that the SQLite file is still the one the server opened."""
READ_ATTEMPTS = 3
"""Tries of a request that only reads before a transient failure answers "store unavailable": after a database
restart each pooled connection fails once before the pool opens new ones."""
SETTLE = 1.0
"""Seconds without a failure before an answer of the store counts as the end of an outage (a restarting database
answers some connections while it still refuses others)."""
TRANSIENT_SQLSTATES = ("08", "53", "57P01", "57P02", "57P03", "57P05")
"""PostgreSQL's error codes (SQLSTATE prefixes) of a database that is unreachable for now: a connection exception,
insufficient resources (too many connections, disk full), an administrator's or a crash's shutdown, a server that
cannot take connections yet (starting up, shutting down), an idle session ended."""
CAUSES = 8
"""Links of an error's chain (the driver's error a SQLAlchemy error wraps, its cause...) read to classify it."""
MESSAGE = "Internal error: store unavailable"


class StoreUnavailable(InternalError):
    """-32603 "store unavailable": the store did not take a write, or did not answer a read; what was not written is
    kept and retried."""

    def __init__(self, task_id: str | None = None, reason: str = "store unavailable") -> None:
        data = {"reason": reason} if task_id is None else {"taskId": task_id, "reason": reason}
        super().__init__(MESSAGE, data=data)


def transient(error: BaseException) -> bool:
    """Whether a failed read or write may succeed later: the database is unreachable, restarting, locked, full or
    read-only. Read from the error and the errors it wraps (SQLAlchemy's DBAPIError around the driver's: a connection
    refused or reset, asyncpg's CannotConnectNowError, ConnectionDoesNotExistError, AdminShutdownError...)."""
    return any(_transient_link(link) for link in _chain(error))


def _chain(error: BaseException) -> list[BaseException]:
    """The error, the driver's error it wraps (`orig`) and their causes, outermost first, at most CAUSES of them."""
    found: list[BaseException] = []
    pending = [error]
    while pending and len(found) < CAUSES:
        link = pending.pop(0)
        if all(link is not known for known in found):
            found.append(link)
            pending += [e for e in (getattr(link, "orig", None), link.__cause__) if isinstance(e, BaseException)]
    return found


def _transient_link(error: BaseException) -> bool:
    if isinstance(error, StoreUnavailable | OperationalError | InterfaceError | OSError | TimeoutError):
        return True
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    sqlstate = getattr(error, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate.startswith(TRANSIENT_SQLSTATES):
        return True
    asyncpg_errors = sys.modules.get("asyncpg.exceptions")
    return asyncpg_errors is not None and isinstance(error, asyncpg_errors.InterfaceError)


def cause(error: BaseException) -> str:
    """What a transient failure came down to, for the log: the name of the innermost transient error of its chain."""
    links = [link for link in _chain(error) if _transient_link(link)] or [error]
    return type(links[-1]).__name__


class Outage:
    """The store's outage as this process logs it: one warning when a read or write first finds the store
    unreachable, one when the store answers again (SETTLE seconds after the last failure), and between them only a
    count of the requests answered "store unavailable", never a line or a traceback per request."""

    def __init__(self) -> None:
        self.since: float | None = None
        """When the outage began (`time.monotonic`), None while the store answers."""
        self.last_failure = 0.0
        self.refused = 0

    def failed(self, error: BaseException) -> None:
        """A read or write failed for a transient reason: the outage begins, or goes on."""
        self.last_failure = time.monotonic()
        if self.since is None:
            self.since = self.last_failure
            self.refused = 0
            log.warning(
                "store unavailable (%s): requests are answered \"store unavailable\" and writes are kept and retried "
                "until it answers again", cause(error),
            )

    def refuse(self, error: BaseException, task_id: str | None = None) -> StoreUnavailable:
        """The answer to a request the store failed for a transient reason (`error`), the outage noted."""
        self.failed(error)
        self.refused += 1
        return StoreUnavailable(task_id)

    def answered(self) -> None:
        """The store answered a read or took a write: an outage is over once no failure came for SETTLE seconds."""
        if self.since is not None and time.monotonic() - self.last_failure >= SETTLE:
            log.warning(
                "store available again after %.1f s; %d requests were answered \"store unavailable\"",
                time.monotonic() - self.since, self.refused,
            )
            self.since = None


OUTAGE = Outage()
"""This process's outage log (a process serves one store)."""


async def as_request(call: Callable[[], Awaitable[T]], attempts: int = 1) -> T:
    """`call()` as a request makes it: a transient failure of the store tried again (a request that only reads may
    take up to READ_ATTEMPTS tries, with backoff), then answered StoreUnavailable and noted in the outage's log;
    A2A errors and other failures as they are."""
    delays = backoff()
    for _ in range(attempts - 1):
        try:
            return await call()
        except A2AError:
            raise
        except Exception as error:
            if not transient(error):
                raise
        await asyncio.sleep(next(delays))
    try:
        return await call()
    except A2AError:
        raise
    except Exception as error:
        if transient(error):
            raise OUTAGE.refuse(error) from error
        raise


def backoff() -> Iterator[float]:
    """The waits between retries: doubling from BACKOFF_FIRST, then BACKOFF_MAX for as long as it takes."""
    delay = BACKOFF_FIRST
    while True:
        yield delay
        delay = min(delay * 2, BACKOFF_MAX)


class StoreHealth:
    """Whether the store may be written: `problem` is None while it may, else why not (the SQLite file
    disappeared); `failing` names the last write's failure until a write succeeds again."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.problem: str | None = None
        self.failing: str | None = None
        self._identity = self._stat() if path is not None else None

    def wrote(self, error: BaseException | None) -> None:
        """Note how the last write ended (a transient failure begins an outage, a write taken may end it)."""
        self.failing = None if error is None else f"the last write failed: {type(error).__name__}"
        if error is None:
            OUTAGE.answered()
        elif transient(error):
            OUTAGE.failed(error)

    def _stat(self) -> tuple[int, int] | None:
        assert self.path is not None
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_dev, info.st_ino

    def check(self) -> str | None:
        """Look at the file again; once it is gone or replaced, writes stay refused until a restart."""
        if self.problem is None and self.path is not None and self._identity is not None:
            if self._stat() != self._identity:
                self.problem = f"the store file {self.path} was removed or replaced while the server ran"
                log.error("%s: writes are refused and readiness fails until the server is restarted", self.problem)
        return self.problem

    def opened(self) -> None:
        """The file exists now (created at start-up): remember which file it is."""
        if self.path is not None and self._identity is None:
            self._identity = self._stat()

    def ensure_writable(self) -> None:
        if self.problem is not None:
            raise StoreUnavailable(reason=self.problem)

    async def watch(self) -> None:
        """Check the file every FILE_CHECK seconds while the server runs."""
        while self.path is not None and self.check() is None:
            await asyncio.sleep(FILE_CHECK)
