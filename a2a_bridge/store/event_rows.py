"""The event log's rows (`bridge_events`): the events one save logs go in one row, under the save's last revision,
where a row per event cost an insert each (about 40k instructions on SQLite, a heap and an index entry and a NOTIFY on
PostgreSQL). A row of one event holds its StreamResponse's JSON as it is, as every row written before did; a row of
several holds a line per event, "<revision> <JSON>" (compact JSON has no line break, and such a row begins with a digit
where an event's JSON begins with "{")."""

from collections.abc import Sequence
from typing import Any


def log_rows(task_id: str, log: Sequence[tuple[int, str]]) -> tuple[dict[str, Any], ...]:
    """The rows of the events (revision, body) one save of a task logs, in revision order: none, or one."""
    if not log:
        return ()
    if len(log) == 1:
        return ({"task_id": task_id, "seq": log[0][0], "body": log[0][1]},)
    lines = "\n".join([f"{revision} {body}" for revision, body in log])
    return ({"task_id": task_id, "seq": log[-1][0], "body": lines},)


def row_events(seq: int, body: str) -> list[tuple[int, str]]:
    """The events (revision, body) of a row logged under revision `seq`, in order."""
    if not body[:1].isdigit():
        return [(seq, body)]
    events: list[tuple[int, str]] = []
    for line in body.split("\n"):
        revision, _, text = line.partition(" ")
        events.append((int(revision), text))
    return events
