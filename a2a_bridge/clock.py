"""Clocks passed into the server: the system clock, and a stepping clock for deterministic capture and tests."""

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


def iso(moment: datetime) -> str:
    """UTC ISO 8601 with milliseconds and a Z, as the kit writes times."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
