"""The push outbox's rows as the ledger takes and gives them: a task and config's delivery (`Delivery`), and a push
config added with a save of its task (`PushAdded`), and the changes of a row the outbox asks (`Change`)."""

from datetime import datetime
from typing import Any, NamedTuple


class Delivery(NamedTuple):
    """The outbox's row of one task and push config: the revision delivered up to (`delivered`: its events after it
    are still to deliver, in order), the failed attempts at the next one and when to try again, whether it was given up
    (`dead`: a dead letter until an operator redelivers it), and who delivers it now (`holder`, a session, until
    `held_until`; `holds` counts the holds taken, the token a settle is conditional on)."""

    task_id: str
    config_id: str
    agent: str
    delivered: int
    attempts: int = 0
    due_at: datetime | None = None
    failing_since: datetime | None = None
    dead: bool = False
    last_error: str | None = None
    holder: int | None = None
    held_until: datetime | None = None
    holds: int = 0


class PushAdded(NamedTuple):
    """A push config added to a task in a save of the task: its outbox row (written unless the task and config have
    one) and its config's row in the push config table `table` (both None when the config is stored apart)."""

    delivery: Delivery
    table: Any = None
    config: dict[str, Any] | None = None


class Hold(NamedTuple):
    """Hold a delivery for `session` until `until`, only if it is still as read (delivered as far, held as often)."""

    delivery: Delivery
    session: int
    until: datetime


class Settle(NamedTuple):
    """Store what became of a held delivery and release the hold, only if no other replica took it over."""

    held: Delivery
    settled: Delivery


class Drop(NamedTuple):
    """Remove a delivery that is done with, only if it is held as often as when read."""

    delivery: Delivery


Change = Hold | Settle | Drop
"""One row change of a batch; each answers whether it changed its row."""
