"""The outbox of push notifications: each task's stored events delivered to each of its push configs from the store,
at least once and in order, retried on an exponential schedule and given up (a dead letter an operator can deliver
again) after it. What is to deliver is the task's event log, written in the same transaction as the events
(`Ledger.save(log=)`), and how far each config got is a row of its own (`Delivery`), so a crash, a restart or a
replica's death loses nothing: any live replica goes on where the last delivery stopped (docs/webhooks.md)."""

import asyncio
import collections
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from a2a.server.context import ServerCallContext
from a2a.server.tasks import DatabasePushNotificationConfigStore, PushNotificationConfigStore
from a2a.types import TaskPushNotificationConfig

from a2a_bridge.core.clock import Clock
from a2a_bridge.push.config_rows import config_row
from a2a_bridge.push.attempts import RetrySchedule, delivery_id
from a2a_bridge.push.logged_events import END, MESSAGE, event_kind
from a2a_bridge.push.webhook_wire import WebhookPoster
from a2a_bridge.push.webhooks import FailureLog, WebhookPolicy
from a2a_bridge.push.workers import Workers
from a2a_bridge.store.ledger import Delivery, Ledger, PushAdded
from a2a_bridge.store.push_rows import Drop, Settle
from a2a_bridge.store.store_faults import OUTAGE, transient

log = logging.getLogger(__name__)

POLL = 1.0
"""Seconds between reads of the outbox when nothing wakes it (the retries due, other replicas' events)."""
HOLD = timedelta(seconds=60)
"""How long a replica holds a delivery it attempts: longer than an attempt (the webhook client's timeout), after which
any replica may take it over (at once when the holder's session is gone)."""
BATCH = 64
"""Deliveries read per round, and attempted at once at the most (as many workers at the most)."""
CACHED = 256
"""Events of one task kept in memory for its deliveries at the most (past it they are read from the store)."""


class Outbox:
    """One agent's push notifications: configs registered, their deliveries run from the store."""

    def __init__(
        self,
        agent: str,
        ledger: Ledger,
        push_store: PushNotificationConfigStore,
        poster: WebhookPoster,
        policy: WebhookPolicy,
        clock: Clock,
        schedule: RetrySchedule | None = None,
        observe: Callable[[str], None] | None = None,
    ) -> None:
        """`observe` is called with each attempt's outcome: `delivered`, `failed`, `refused` (the policy) or `dead`."""
        self.agent = agent
        self.ledger = ledger
        self.push_store = push_store
        self.poster = poster
        self.policy = policy
        self.clock = clock
        self.schedule = schedule or RetrySchedule()
        self.observe = observe
        self.failures = FailureLog()
        self.session = 0
        self.logged: set[str] = set()
        """Tasks of this process with push configs, whose events a store that logs no other events must log."""
        self._wake = asyncio.Event()
        self._running: set[tuple[str, str]] = set()
        self._workers: Workers[tuple[Delivery, bool]] = Workers(self._deliver, BATCH)
        """The delivery runs queued or under way (`_running`), each with whether it is read from the store."""
        self._runs: collections.Counter[str] = collections.Counter()
        """Delivery runs under way per task."""
        self._stored: set[str] = set()
        """Tasks whose events were stored since a delivery run of theirs began: the run goes on to them."""
        self._configs: dict[tuple[str, str], TaskPushNotificationConfig] = {}
        """The push configs added on this replica whose deliveries are not done with (read from the store otherwise)."""
        self._loop: asyncio.Future[None] | None = None
        self._ticker: asyncio.TimerHandle | None = None
        self._attached: dict[str, list[PushAdded]] = {}
        """Push configs attached to tasks whose next save writes them (`attach`)."""
        self._known: dict[str, dict[str, Delivery]] = {}
        """Deliveries whose rows this replica wrote last (added, or settled delivered), by task and config: started as
        soon as their task's events are stored, with no read of the store (a hold refused forgets one)."""
        self._woken: set[str] = set()
        """Tasks whose events were stored since the last round."""
        self._polled = 0.0
        """When the store's due deliveries were last read (the event loop's time)."""
        self._rows: set[tuple[str, str]] = set()
        """Deliveries whose row may be in the store: read at `start`, added here, not yet dropped here."""
        self._new: set[tuple[str, str]] = set()
        """Deliveries attached with no row in the store (`_fresh`), their rows not yet saved."""
        self._sure: set[tuple[str, str]] = set()
        """Deliveries whose row this process wrote last, on a store no other process writes (not `shared`): their runs
        take no hold in the store (`_deliver`)."""
        self._events: dict[str, tuple[int, int, list[tuple[int, str]]]] = {}
        """Per task with deliveries known here, the events this replica logged of revisions (start, end], all of them
        (`saved`): what a delivery started by its task's save reads instead of the store."""

    def logs(self, task_id: str) -> bool:
        """Whether a save of this task writes its events to the event log for the outbox."""
        return task_id in self.logged

    async def add(self, config: TaskPushNotificationConfig, context: ServerCallContext, after: int) -> None:
        """Add a push config to its task: its outbox row first (a crash between the two leaves a row whose config is
        missing, dropped at its first attempt, never a config that is not delivered), its deliveries starting with the
        events after revision `after`."""
        self.logged.add(config.task_id)
        self._configs[(config.task_id, config.id)] = config
        delivery = Delivery(config.task_id, config.id, self.agent, after, due_at=self.clock.now())
        fresh = self._fresh(delivery)
        await self.ledger.add_delivery(delivery)
        await self.push_store.set_info(config.task_id, config, context)
        self._know(delivery, fresh)

    async def attach(self, config: TaskPushNotificationConfig, context: ServerCallContext, after: int) -> None:
        """Add a push config (its task id and id set) to its task with the task's next save (`taken`), its outbox row
        and config row in the save's own transaction where the config table is in the ledger's database (else as `add`
        does), its deliveries starting with the events after revision `after`."""
        store = self.push_store
        in_ledger = isinstance(store, DatabasePushNotificationConfigStore) and getattr(self.ledger, "engine", None) is store.engine
        if not in_ledger:
            await self.add(config, context, after)
            return
        await store._ensure_initialized()
        self.logged.add(config.task_id)
        self._configs[(config.task_id, config.id)] = config
        table = store.config_model.__table__
        row = config_row(store, config, store.owner_resolver(context))
        delivery = Delivery(config.task_id, config.id, self.agent, after, due_at=self.clock.now())
        if self._fresh(delivery):
            self._new.add((config.task_id, config.id))
        self._attached.setdefault(config.task_id, []).append(PushAdded(delivery, table, row))

    def _fresh(self, delivery: Delivery) -> bool:
        """Whether the row about to be added for a delivery is surely written as it is (no row of its task and config
        can be in the store, which no other process writes); it may be in the store from then on."""
        key = (delivery.task_id, delivery.config_id)
        fresh = not self.ledger.shared and key not in self._rows
        self._rows.add(key)
        return fresh

    def taken(self, task_id: str) -> list[PushAdded]:
        """The push configs attached to a task since its last save, for the save about to be written (`restore` them
        if it is not)."""
        return self._attached.pop(task_id, []) if self._attached else []

    def saved(self, task_id: str, pushed: list[PushAdded], before: int, after: int, logged: list[tuple[int, str]]) -> None:
        """A save of a task whose events are logged is committed: the push configs it took have their rows as
        attached, and the events it logged (revisions `before` to `after`, every one of them) are kept for the task's
        deliveries known here (a save this replica did not see breaks the run: the next starts over)."""
        for added in pushed:
            key = (added.delivery.task_id, added.delivery.config_id)
            self._know(added.delivery, key in self._new)
            self._new.discard(key)
        if task_id not in self._known and not self._runs[task_id]:
            return
        kept = self._events.get(task_id)
        if kept is not None and kept[1] == before and len(kept[2]) + len(logged) <= CACHED:
            kept[2].extend(logged)
            self._events[task_id] = (kept[0], after, kept[2])
        elif len(logged) <= CACHED:
            self._events[task_id] = (before, after, list(logged))
        else:
            self._events.pop(task_id, None)

    def _kept_events(self, task_id: str, delivered: int) -> list[tuple[int, str]] | None:
        """The task's events after revision `delivered` as this replica logged them, when it logged every one since."""
        kept = self._events.get(task_id)
        if kept is None or not kept[0] <= delivered <= kept[1]:
            return None
        return [event for event in kept[2] if event[0] > delivered]

    def restore(self, task_id: str, pushed: list[PushAdded]) -> None:
        """Push configs taken for a save that was not written: they go with the task's next save."""
        if pushed:
            self._attached[task_id] = pushed + self._attached.get(task_id, [])

    def detach(self, task_id: str, created: bool) -> None:
        """Forget the push configs attached to a task and not saved with it (their request refused, or no task made:
        `created` False, when the task's events need no logging either)."""
        for added in self._attached.pop(task_id, []):
            self._configs.pop((task_id, added.delivery.config_id), None)
            self._new.discard((task_id, added.delivery.config_id))
        if not created:
            self.logged.discard(task_id)

    def stored(self, task_id: str, ended: bool) -> None:
        """Events of a task with push configs were stored: deliver them now (a task that ended logs no more)."""
        if ended:
            self.logged.discard(task_id)
        if self._runs[task_id]:
            self._stored.add(task_id)
        self._woken.add(task_id)
        self._wake.set()

    async def start(self, session: int) -> None:
        """Deliver as `session`, from what the store holds (tasks of other sessions' deliveries too)."""
        self.session = session
        for delivery in await self.ledger.deliveries(self.agent):
            self._rows.add((delivery.task_id, delivery.config_id))
            if not delivery.dead:
                self.logged.add(delivery.task_id)
        if self._loop is None:
            self._loop = asyncio.ensure_future(self._run())
            self._ticker = asyncio.get_running_loop().call_later(POLL, self._tick)

    async def stop(self, grace: float) -> None:
        """Stop delivering: attempts under way get `grace` seconds, then are abandoned (their holds run out and any
        replica, this one after a restart, attempts them again)."""
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
        if self._ticker is not None:
            self._ticker.cancel()
        await self._workers.stop(grace)

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait until every event stored so far has been attempted (nothing due, nothing under way), at most
        `timeout` seconds: what a test waits for."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            if self._running:
                await asyncio.sleep(0.01)
                continue
            if not await self.ledger.due_deliveries(self.agent, self.clock.now(), 1):
                return
            self._wake.set()
            await asyncio.sleep(0.01)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self._round()
            except Exception as error:  # noqa: BLE001 - the store is away: the next round tries again
                if not transient(error):
                    log.exception("the push outbox of agent %s failed; trying again", self.agent)
                else:
                    OUTAGE.failed(error)
            await self._wake.wait()

    def _tick(self) -> None:
        """Wake the outbox every POLL seconds (one timer, where a wait with a timeout made a task and a timer a round)."""
        self._wake.set()
        self._ticker = asyncio.get_running_loop().call_later(POLL, self._tick)

    async def _round(self) -> None:
        """Start the deliveries of the tasks just stored that this replica knows the rows of; and, every POLL seconds
        or when woken otherwise, the deliveries due in the store that no live replica holds (retries, rows of other
        replicas or of before a restart)."""
        if not self.session:
            return
        woken, self._woken = self._woken, set()
        for task_id in woken:
            for delivery in list(self._known.get(task_id, {}).values()):
                if not self._start(delivery):
                    self._woken.add(task_id)
        now_loop = asyncio.get_running_loop().time()
        if woken and now_loop - self._polled < POLL and all(t in self._known or self._runs[t] for t in woken):
            return
        self._polled = now_loop
        now = self.clock.now()
        for delivery in await self.ledger.due_deliveries(self.agent, now, BATCH):
            key = (delivery.task_id, delivery.config_id)
            if delivery.task_id in self._woken and delivery.config_id in self._known.get(delivery.task_id, ()):
                continue  # stored while the store was read: the next round starts it from what this process wrote
            if key in self._sure and delivery.config_id in self._known.get(delivery.task_id, ()):
                continue  # known here as this process wrote it last (its settle may not have committed yet)
            if key not in self._running and len(self._running) < BATCH and await self._free(delivery, now):
                self._start(delivery, from_store=True)

    def _start(self, delivery: Delivery, from_store: bool = False) -> bool:
        """Queue a delivery for the workers unless it is queued or runs already (`from_store`: found due in the store,
        whose events are read from it); False when BATCH are already."""
        key = (delivery.task_id, delivery.config_id)
        if key in self._running:
            return True
        if len(self._running) >= BATCH:
            return False
        self._running.add(key)
        self._runs[key[0]] += 1
        self._workers.put((delivery, from_store))
        return True

    def _know(self, delivery: Delivery, sure: bool = False) -> None:
        """Note a row as this replica wrote it, when it is to be delivered at once (not failing, not given up);
        `sure`: the row is surely as written (`_sure`)."""
        key = (delivery.task_id, delivery.config_id)
        if sure:
            self._sure.add(key)
        else:
            self._sure.discard(key)
        if delivery.attempts or delivery.dead:
            self._forget(delivery)
            return
        self._known.setdefault(delivery.task_id, {})[delivery.config_id] = delivery

    def _forget(self, delivery: Delivery) -> None:
        known = self._known.get(delivery.task_id)
        if known is not None and known.pop(delivery.config_id, None) is not None and not known:
            del self._known[delivery.task_id]
            if not self._runs[delivery.task_id]:
                self._events.pop(delivery.task_id, None)

    def _ran(self, key: tuple[str, str]) -> None:
        """A delivery run ended: its task's kept events go unless a delivery of the task is known or runs on."""
        self._running.discard(key)
        self._runs[key[0]] -= 1
        if self._runs[key[0]] <= 0:
            del self._runs[key[0]]
            if key[0] not in self._known:
                self._events.pop(key[0], None)

    async def _free(self, delivery: Delivery, now: datetime) -> bool:
        """Whether this process may take the delivery: no one holds it, the hold ran out, or its holder is gone."""
        if delivery.holder is None or delivery.holder == self.session:
            return True
        if delivery.held_until is None or delivery.held_until <= now:
            return True
        return not await self.ledger.session_alive(delivery.holder)

    async def _deliver(self, run: tuple[Delivery, bool]) -> None:
        """Deliver the events after the delivery's revision in order under one hold (taken before its config is read:
        a delivery another replica or an earlier run finished costs no read), settled at the end of the run: at the
        first failure (the next attempt scheduled), once half the hold has passed, or when no event is left; the row
        is dropped once the task's end is delivered, with the ledger's next group commit, not waited for (`_written`: a
        crash before it commits sends the events again, same ids, in order; what the next run writes commits after it).
        Events left or stored during the run queue the next. A run started by its task's save reads the events this
        replica kept of it (`saved`), one `from_store` reads them from the store."""
        delivery, from_store = run
        key = (delivery.task_id, delivery.config_id)
        self._forget(delivery)
        self._stored.discard(delivery.task_id)
        try:
            until = self.clock.now() + HOLD
            if not from_store and key in self._sure and delivery.holder is None:
                held = delivery  # the row is as this process wrote it, and no other process writes it
            elif await self.ledger.hold_delivery(delivery, self.session, until):
                held = delivery._replace(holder=self.session, held_until=until, holds=delivery.holds + 1)
            else:
                self._sure.discard(key)
                self._ran(key)
                return
            config = await self._config(held)
            if config is None:
                self._ran(key)
                return
            kept = None if from_store else self._kept_events(held.task_id, held.delivered)
            waiting = kept if kept is not None else await self.ledger.events_after(held.task_id, held.delivered)
            settled, ended = await self._run_events(held, config, waiting, until - HOLD / 2)
        except Exception as error:  # noqa: BLE001 - the store is away: the hold runs out and the delivery is tried again
            self._failed(error, key)
            self._ran(key)
            return
        written = self.ledger.later(Drop(held) if ended else Settle(held, settled))
        if ended or self.ledger.shared:  # the delivery waits for its row (a hold is taken of it as it was settled)
            written.add_done_callback(lambda done: self._written(key, held, settled, waiting, ended, done))
            return
        written.add_done_callback(lambda done: self._changed(key, done))
        self._next(key, held, settled, waiting, True)

    def _next(
        self, key: tuple[str, str], held: Delivery, settled: Delivery, waiting: list[tuple[int, str]], sure: bool
    ) -> None:
        """After a run that did not deliver its task's end: the delivery known here as settled (`sure`: on a store no
        other process writes), or run again at once for the events left or stored during the run."""
        delivery = settled._replace(holder=None, held_until=None, holds=held.holds)
        read_all = not waiting or settled.delivered == waiting[-1][0]
        if settled.attempts or settled.dead or (read_all and delivery.task_id not in self._stored):
            self._know(delivery, sure)
            self._ran(key)
            return
        if sure:
            self._sure.add(key)
        self._workers.put((delivery, False))

    def _written(
        self, key: tuple[str, str], held: Delivery, settled: Delivery, waiting: list[tuple[int, str]], ended: bool,
        written: "asyncio.Future[bool]",
    ) -> None:
        """A drop, or a settle on a store replicas share, committed or not: the delivery goes on or is done."""
        changed = self._changed(key, written)
        if changed and ended:
            self._configs.pop(key, None)
            self._rows.discard(key)
        if changed and not ended:
            self._next(key, held, settled, waiting, False)
        else:
            self._ran(key)

    def _changed(self, key: tuple[str, str], written: "asyncio.Future[bool]") -> bool:
        """Whether a run's settle or drop changed its row; where it did not (another replica took the delivery over) or
        failed (the store is away), what this replica knows of the row is forgotten and the store's due rows say what
        is left to deliver (sent again from where the row stands)."""
        error = None if written.cancelled() else written.exception()
        if error is None and not written.cancelled() and written.result():
            return True
        self._sure.discard(key)
        known = self._known.get(key[0], {}).get(key[1])
        if known is not None:
            self._forget(known)
        if isinstance(error, Exception):
            self._failed(error, key)
        return False

    def _failed(self, error: Exception, key: tuple[str, str]) -> None:
        if not transient(error):  # the store is away otherwise
            log.error("delivery of webhook %s of task %s failed", key[1], key[0], exc_info=error)
        else:
            OUTAGE.failed(error)

    async def _run_events(
        self, held: Delivery, config: TaskPushNotificationConfig, waiting: list[tuple[int, str]], stop: datetime
    ) -> tuple[Delivery, bool]:
        """Attempt the events in order, up to the first failure or `stop`: the delivery as it stands after them (as
        held once the task's end was delivered), and whether the task's end was delivered. The policy judges the config's URL once for the run."""
        delivered = held.delivered
        refused = await self.policy.refusal(config.url)
        for revision, body in waiting:
            if self.clock.now() >= stop:
                break
            kind = event_kind(body)
            if kind == MESSAGE:  # a message of the task's: push notifications carry its updates only
                delivered = revision
                continue
            failed = await self._attempt(held, delivered, config, revision, body.encode(), refused)
            if failed is not None:
                return failed, False
            delivered = revision
            if kind == END:
                return held, True  # the row is dropped as held: what it became is not stored
        return self._delivered(held, delivered), False

    def _delivered(self, held: Delivery, delivered: int) -> Delivery:
        """The held delivery once delivered up to revision `delivered` (as it was when no attempt succeeded)."""
        if delivered == held.delivered:
            return held
        return held._replace(delivered=delivered, attempts=0, failing_since=None, last_error=None, due_at=self.clock.now())

    async def _config(self, held: Delivery) -> TaskPushNotificationConfig | None:
        """The held delivery's push config (kept from its `add` on this replica, else read); its row is dropped when
        the config was deleted."""
        key = (held.task_id, held.config_id)
        found = self._configs.get(key)
        if found is None:
            configs = await self.push_store.get_info_for_dispatch(held.task_id)
            found = next((config for config in configs if config.id == held.config_id), None)
        if found is None:
            await self.ledger.drop_delivery(held)
        return found

    async def _attempt(
        self, held: Delivery, delivered: int, config: TaskPushNotificationConfig, revision: int, body: bytes,
        refused: str | None,
    ) -> Delivery | None:
        """One attempt at one event of a delivery delivered up to `delivered` (`refused`: why the policy refuses its
        URL): None once delivered, else the delivery as it stands after the failure."""
        reason = refused
        if reason is None:
            headers = {"webhook-id": delivery_id(held.task_id, held.config_id, revision), "a2a-task-revision": str(revision)}
            reason = await self.poster.post(config, body, headers)
        if reason is None:
            if self.failures.failing:
                self.failures.delivered(held.task_id, config)
            self._observe("delivered")
            return None
        now = self.clock.now()
        held = self._delivered(held, delivered)
        self.failures.failed(held.task_id, config, reason)
        attempts = held.attempts + 1
        since = held.failing_since or now
        dead = refused is not None or (now - since).total_seconds() >= self.schedule.give_up
        self._observe("refused" if refused is not None else "failed")
        if dead:
            log.warning(
                "webhook %s of task %s given up at revision %s after %d attempts: %s (a dead letter: an operator can "
                "deliver it again)", config.id, held.task_id, revision, attempts, reason,
            )
            self._observe("dead")
        due = now + timedelta(seconds=self.schedule.delay(attempts))
        return held._replace(attempts=attempts, failing_since=since, last_error=reason[:255], due_at=due, dead=dead)

    def _observe(self, outcome: str) -> None:
        if self.observe is not None:
            self.observe(outcome)

    async def redeliver(self, task_id: str, config_id: str | None = None) -> int:
        """An operator delivers a task's dead letters again, from where they stopped; how many."""
        again = await self.ledger.redeliver(self.agent, task_id, config_id, self.clock.now())
        if again:
            self.logged.add(task_id)
            self._wake.set()
        return again

    async def dead_letters(self, task_id: str | None = None) -> list[Delivery]:
        return await self.ledger.deliveries(self.agent, task_id=task_id, dead=True)
