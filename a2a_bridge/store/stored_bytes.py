"""What each principal's tasks hold in the store (`TaskRecord.stored_bytes`, summed by owner: `Ledger.stored_bytes`),
read cheaply for `max_stored_bytes`: the store's sum once every `REFRESH` seconds per principal (less often where the
sum takes long: `SPREAD`), plus the bytes this process admitted since that read. Every replica reads the same store, so a quota holds across replicas and
restarts; a replica may pass it by what the others admit within one refresh."""

import asyncio
import logging
import time
from collections.abc import Callable

from a2a_bridge.store.ledger import Ledger

log = logging.getLogger(__name__)

REFRESH = 1.0
"""Seconds a principal's stored sum is used before the store is asked again."""
SPREAD = 20
"""A sum that took T seconds to read is used for at least SPREAD × T seconds: summing a principal's tasks takes at most
1/SPREAD of the time (a sum over 100,000 tasks took 6 ms on SQLite, 42 ms on PostgreSQL)."""


class StoredBytes:
    """Each principal's stored bytes: the last sum read from the ledger, and the bytes admitted here since."""

    def __init__(self, ledger: Ledger, refresh: float = REFRESH, now: Callable[[], float] = time.monotonic) -> None:
        self.ledger = ledger
        self.refresh = refresh
        self.now = now
        self._read: dict[str, tuple[float, int]] = {}
        """By principal: when its sum is to be read again, and the sum last read."""
        self._since: dict[str, int] = {}
        """By principal: the bytes admitted since its sum was read."""
        self._reading: dict[str, asyncio.Future[None]] = {}

    async def total(self, who: str) -> int:
        """The bytes `who`'s tasks hold (as last read), with what was admitted since."""
        read = self._read.get(who)
        if read is None or self.now() >= read[0]:
            reading = self._reading.get(who)
            if reading is None:
                reading = asyncio.ensure_future(self._fetch(who))
                self._reading[who] = reading
            await asyncio.shield(reading)
        return self._read.get(who, (0.0, 0))[1] + self._since.get(who, 0)

    def add(self, who: str, size: int) -> None:
        """Count `size` bytes admitted for `who`'s tasks until the next read of its sum."""
        self._since[who] = self._since.get(who, 0) + size

    async def _fetch(self, who: str) -> None:
        """Read `who`'s sum; the bytes admitted before the read began are in it (or about to be). A store that does
        not answer leaves the last sum (0 at first): the request then meets the store's own error."""
        admitted = self._since.get(who, 0)
        started = self.now()
        try:
            stored = await self.ledger.stored_bytes(who)
        except Exception as error:  # noqa: BLE001 - the quota is read again at the next refresh
            log.warning("could not read the stored bytes of a principal: %s", type(error).__name__)
            stored = self._read.get(who, (0.0, 0))[1]
        finally:
            self._reading.pop(who, None)
        self._read[who] = (started + max(self.refresh, SPREAD * (self.now() - started)), stored)
        self._since[who] = max(0, self._since.get(who, 0) - admitted)
