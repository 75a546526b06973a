"""This process's session on the ledger: taken at start and handed to every agent's host. When the connection that
holds the session's lock is lost, the hosts take no turn (those running are fenced) and the process says so in its
log and its readiness, until a new session generation is taken; the old session's claims are then recovered like
those of a replica that died."""

import asyncio
import logging

from a2a_bridge.core.clock import Clock, StoreClock
from a2a_bridge.store.ledger import Ledger
from a2a_bridge.tasks.task_host import TaskHost

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
"""Seconds between attempts to take a new session while the database does not answer."""
CLOCK_SYNC_SECONDS = 5.0
"""Seconds between measures of a `StoreClock`'s offset to the database's clock."""


class SessionKeeper:
    """Holds this process's session generation for its hosts, and takes a new one after a lost connection."""

    def __init__(self, ledger: Ledger, hosts: list[TaskHost], clock: Clock) -> None:
        self.ledger = ledger
        self.hosts = hosts
        self.clock = clock
        self.session = 0
        """The session generation held now; 0 while none is."""
        self._regaining: asyncio.Future[None] | None = None
        self._syncing: asyncio.Future[None] | None = None
        ledger.on_lost(self._lost)

    @property
    def ready(self) -> bool:
        """Whether this process may take turns: it holds a session."""
        return self.session != 0

    async def start(self) -> None:
        """Take a session and start the hosts on it; a `StoreClock` is set to the database's clock first, and kept so."""
        if isinstance(self.clock, StoreClock):
            await self.clock.sync(self.ledger.store_time)
            self._syncing = asyncio.ensure_future(self._sync(self.clock))
        self.session = await self.ledger.start_session(self.clock.now())
        for host in self.hosts:
            await host.start(self.session)

    async def _sync(self, clock: StoreClock) -> None:
        """Measure the clock's offset again every CLOCK_SYNC_SECONDS (a database that does not answer: next time)."""
        while True:
            await asyncio.sleep(CLOCK_SYNC_SECONDS)
            try:
                await clock.sync(self.ledger.store_time)
            except Exception as error:  # noqa: BLE001 - the database is away: the offset measured last stands
                log.debug("clock offset not measured: %s", type(error).__name__)

    def _lost(self) -> None:
        log.error("session %s is lost with its database connection: this replica takes no turn until it has a new one", self.session)
        self.session = 0
        for host in self.hosts:
            host.lose_session()
        if self._regaining is None:
            self._regaining = asyncio.ensure_future(self._regain())

    async def _regain(self) -> None:
        try:
            while not self.session:
                await asyncio.sleep(RETRY_SECONDS)
                try:
                    session = await self.ledger.start_session(self.clock.now())
                except Exception as error:  # noqa: BLE001 - the database is still away: try again
                    log.warning("no new session yet: %s", type(error).__name__)
                    continue
                for host in self.hosts:
                    host.regain_session(session)
                self.session = session
                log.warning("took session %s: this replica takes turns again", session)
        finally:
            self._regaining = None

    async def stop(self) -> None:
        jobs = [job for job in (self._regaining, self._syncing) if job is not None]
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
