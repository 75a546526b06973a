"""The last hour of the server's own traffic, minute by minute, kept in memory for the console's charts: requests
answered, turns ended (and how many raised), and the turns' durations as a histogram, from which each minute's median
and 95th percentile are read. One process's figures: each replica keeps its own."""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

MINUTES = 60
BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
"""Upper bounds, in seconds, of the duration histogram's buckets (a last one holds everything longer)."""


@dataclass
class Minute:
    """What one minute saw."""

    requests: int = 0
    turns: int = 0
    failed: int = 0
    longest: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS) + 1))

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the q-quantile of the durations (the longest for the last one)."""
        if not self.turns:
            return None
        rank = q * self.turns
        seen = 0
        for index, count in enumerate(self.buckets):
            seen += count
            if seen >= rank and count:
                return min(BOUNDS[index], self.longest) if index < len(BOUNDS) else self.longest
        return self.longest


class MinuteRing:
    """Per-minute counts of the last MINUTES minutes; `now` gives seconds since the epoch (a fake clock in tests)."""

    def __init__(self, now: Callable[[], float] = time.time, minutes: int = MINUTES) -> None:
        self.now = now
        self.span = minutes
        self.kept: dict[int, Minute] = {}

    def _minute(self) -> Minute:
        current = int(self.now() // 60)
        minute = self.kept.get(current)
        if minute is None:
            minute = self.kept[current] = Minute()
            for old in [m for m in self.kept if m <= current - self.span]:
                del self.kept[old]
        return minute

    def request(self) -> None:
        self._minute().requests += 1

    def turn(self, seconds: float, raised: bool) -> None:
        minute = self._minute()
        minute.turns += 1
        minute.failed += raised
        minute.longest = max(minute.longest, seconds)
        index = next((i for i, bound in enumerate(BOUNDS) if seconds <= bound), len(BOUNDS))
        minute.buckets[index] += 1

    def view(self) -> list[dict[str, Any]]:
        """Every minute of the span, the oldest first, the current one last (minutes that saw nothing read zero)."""
        current = int(self.now() // 60)
        rows = []
        for index in range(current - self.span + 1, current + 1):
            minute = self.kept.get(index) or Minute()
            rows.append({
                "minute": datetime.fromtimestamp(index * 60, UTC).isoformat().replace("+00:00", "Z"),
                "requests": minute.requests,
                "turns": minute.turns,
                "failed": minute.failed,
                "p50": minute.quantile(0.5),
                "p95": minute.quantile(0.95),
                "max": minute.longest if minute.turns else None,
            })
        return rows
