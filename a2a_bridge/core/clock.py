"""Clocks passed into the server: the system clock, a stepping clock for deterministic capture and tests, and the
store's clock as a replica reads it (the one clock replicas on a shared database read leases on)."""

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Something that tells the time, as an aware UTC datetime."""

    def now(self) -> datetime: ...


class SystemClock:
    """The machine's clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class SteppingClock:
    """A fake clock that starts at a fixed instant and moves a fixed step at each reading."""

    def __init__(self, start: datetime, step: timedelta = timedelta(milliseconds=250)) -> None:
        self._next = start
        self._step = step

    def now(self) -> datetime:
        current = self._next
        self._next = current + self._step
        return current


class StoreClock:
    """The shared database's clock as this process reads it: its own clock (`base`) moved by the offset last measured
    against the database. Every replica reads leases on it, so a replica whose own clock is off by any amount neither
    takes over a live claim nor keeps one past its lease; the error left is half a round trip to the database."""

    def __init__(self, base: Clock) -> None:
        self.base = base
        self.offset = timedelta(0)

    def now(self) -> datetime:
        return self.base.now() + self.offset

    async def sync(self, store_time: Callable[[], Awaitable[datetime | None]]) -> None:
        """Measure the offset again: the database's time against the middle of the round trip that read it (kept as it
        was when the database has no clock to offer)."""
        before = self.base.now()
        measured = await store_time()
        after = self.base.now()
        if measured is not None:
            self.offset = measured - (before + (after - before) / 2)


def iso(moment: datetime) -> str:
    """UTC ISO 8601 with milliseconds and a Z, as the kit writes times."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
