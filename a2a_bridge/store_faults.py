"""Store faults: which failures of a write are worth retrying (the store is down or full) and which are not (the
content cannot be stored), the backoff between retries, and the watch that notices a SQLite file taken away."""

import asyncio
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from a2a.utils.errors import InternalError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.05
BACKOFF_MAX = 2.0
"""Seconds between retries of a kept write: doubling from the first to the most."""
STORE_GRACE = 5.0
"""Seconds a caller waits for a write the store refuses before it is told the store is unavailable."""
FILE_CHECK = 1.0
"""Seconds between checks that the SQLite file is still the one the server opened."""


class StoreUnavailable(InternalError):
    """-32603 "store unavailable": the store did not take a write; what was not written is kept and retried."""

    def __init__(self, task_id: str | None = None, reason: str = "store unavailable") -> None:
        data = {"reason": reason} if task_id is None else {"taskId": task_id, "reason": reason}
        super().__init__("Internal error: store unavailable", data=data)


def transient(error: BaseException) -> bool:
    """Whether a failed write may succeed later: the database is unreachable, locked, full or read-only."""
    if isinstance(error, StoreUnavailable | OperationalError | InterfaceError | OSError | TimeoutError):
        return True
    return isinstance(error, DBAPIError) and bool(error.connection_invalidated)


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
        """Note how the last write ended."""
        self.failing = None if error is None else f"the last write failed: {type(error).__name__}"

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
