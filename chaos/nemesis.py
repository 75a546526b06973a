"""The nemesis: faults on a seeded schedule until its deadline (SIGKILL and restart a replica, SIGSTOP a replica past
the lease and SIGCONT it, restart PostgreSQL fast or immediate), one at a time, each recorded; then heals."""

import asyncio
import random
import signal
from collections import Counter
from dataclasses import dataclass, field

from chaos.cluster import START_TIMEOUT, Cluster, ClusterError, Replica
from chaos.history import Fault, History, now

KILL, PAUSE, PG_FAST, PG_IMMEDIATE = "kill", "pause", "pg-restart-fast", "pg-restart-immediate"
KINDS = (KILL, PAUSE, PG_FAST, PG_IMMEDIATE)
RESTART_ATTEMPTS = 3


@dataclass
class Nemesis:
    cluster: Cluster
    history: History
    rng: random.Random
    lease: float
    kinds: tuple[str, ...] = KINDS
    gap: tuple[float, float] = (2.0, 6.0)
    """Seconds between the end of one fault and the start of the next, drawn uniformly."""
    counts: Counter[str] = field(default_factory=Counter)

    async def run(self, duration: float) -> None:
        """Inject faults until `duration` seconds have passed (a fault under way is finished), then heal."""
        deadline = now() + duration
        while self.kinds and now() + self.gap[0] < deadline:
            await asyncio.sleep(self.rng.uniform(*self.gap))
            if now() >= deadline:
                break
            await self.inject(self.rng.choice(self.kinds))
        await self.heal()

    async def inject(self, kind: str) -> None:
        started = now()
        target, detail = "postgres", ""
        if kind == KILL:
            replica = self.rng.choice(self.cluster.replicas)
            target = replica.name
            replica.kill()
            down = self.rng.uniform(0.5, 2.0)
            await asyncio.sleep(down)
            await self.restart(replica)
            detail = f"down {down:.1f} s"
        elif kind == PAUSE:
            replica = self.rng.choice(self.cluster.replicas)
            target = replica.name
            paused = self.lease * self.rng.uniform(1.5, 3.0)
            replica.signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(paused)
            finally:
                replica.signal(signal.SIGCONT)
            detail = f"paused {paused:.1f} s (lease {self.lease:g} s)"
        else:
            mode = "fast" if kind == PG_FAST else "immediate"
            await asyncio.to_thread(self.cluster.postgres.restart, mode)
            detail = f"pg_ctl restart -m {mode}"
        self.counts[kind] += 1
        self.history.fault(Fault(kind, target, started, now(), detail))

    async def restart(self, replica: Replica) -> None:
        """Start a killed replica again, a few times if it cannot start (the database may be restarting)."""
        for attempt in range(RESTART_ATTEMPTS):
            try:
                await replica.start()
                return
            except ClusterError:
                replica.kill()
                if attempt == RESTART_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(1.0)

    async def heal(self) -> None:
        """Every replica running and resumed, every one ready."""
        for replica in self.cluster.replicas:
            replica.signal(signal.SIGCONT)
            if not replica.alive():
                code = replica.proc.returncode if replica.proc else None
                self.history.fault(Fault("exited", replica.name, now(), now(), f"exited by itself with {code}"))
                await self.restart(replica)
        for replica in self.cluster.replicas:
            await replica.wait_ready(START_TIMEOUT)
