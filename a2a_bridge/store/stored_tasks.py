"""`StoredTasks`: finished tasks as stored, with their records, kept in memory so that GetTask and the Task Status
answer them without the database.

Only finished tasks are kept (the task in a terminal state and its record's claim ended): the store never changes
such a task again but for the claim that ended it writing that same end once more. Every write this process commits
and every change another replica announces (PostgreSQL's notices) still forgets the task, and a task read from the
store is kept only when nothing forgot it since the read began (`epoch`), so what is kept is never older than the
store. Memory is bounded by a number of tasks and by the bytes of their protobuf encoding; the task read least
recently goes first. A kept task's JSON (`json`) is made once, on its first GetTask, and dropped with it; the JSON is
kept for tasks of at most `JSON_BYTES` of encoding together, the most recently answered."""

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from a2a.types import Task

from a2a_bridge.core.states import is_terminal
from a2a_bridge.store.ledger import TaskRecord, ended
from a2a_bridge.store.proto_json import to_dict

MAX_TASKS = 10_000
MAX_BYTES = 16 * 1024 * 1024
"""Bytes of the kept tasks' protobuf encoding (their objects take a few times that in memory)."""
JSON_BYTES = 1024 * 1024
"""Protobuf bytes of the kept tasks whose JSON is kept too (a task's JSON objects take several times its encoding)."""
FORGOTTEN = 4_096
"""Recently forgotten task ids remembered with when they were forgotten; a read that began before the oldest of them
is not kept (it cannot tell whether its task was among those forgotten earlier)."""


class StoredTasks:
    """A bounded, least-recently-read-first cache of finished tasks and their records (read only: callers copy)."""

    def __init__(self, max_tasks: int = MAX_TASKS, max_bytes: int = MAX_BYTES, max_json_bytes: int = JSON_BYTES) -> None:
        self.max_tasks, self.max_bytes, self.max_json_bytes = max_tasks, max_bytes, max_json_bytes
        self._entries: OrderedDict[str, tuple[Task, TaskRecord, int]] = OrderedDict()
        self._json: OrderedDict[str, tuple[dict[str, Any], int]] = OrderedDict()
        """The JSON of kept tasks that GetTask answered, with their encoding's size (read only: the answer's envelope
        holds it as it is)."""
        self.json_bytes = 0
        self._forgotten: OrderedDict[str, int] = OrderedDict()
        self._epoch = 0
        self._floor = 0
        """The epoch of the oldest forget no longer remembered in `_forgotten`."""
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def active(self) -> bool:
        """Whether it keeps any task (a memory store's host keeps none)."""
        return self.max_tasks > 0 and self.max_bytes > 0

    def epoch(self) -> int:
        """Take before reading a task from the store, and pass to `keep`."""
        return self._epoch

    def get(self, task_id: str) -> tuple[Task, TaskRecord] | None:
        entry = self._entries.get(task_id)
        if entry is None:
            return None
        self._entries.move_to_end(task_id)
        return entry[0], entry[1]

    def json(self, task: Task) -> dict[str, Any]:
        """`to_dict(task)`, made once for a task equal to the one kept under its id (a copy of it, as GetTask answers
        it) and kept while within `max_json_bytes`, and anew for any other (one whose history an answer cut, one no
        longer kept)."""
        entry = self._entries.get(task.id)
        if entry is None or entry[0] != task:
            return to_dict(task)
        made = self._json.get(task.id)
        if made is not None:
            self._json.move_to_end(task.id)
            return made[0]
        answer = to_dict(task)
        self._json[task.id] = (answer, entry[2])
        self.json_bytes += entry[2]
        while self.json_bytes > self.max_json_bytes:
            self._forget_json(next(iter(self._json)))
        return answer

    def keep(self, task: Task, record: TaskRecord, since: int) -> None:
        """Keep a task read from the store (with its record) after `epoch()` answered `since`, if it has finished and
        nothing forgot it since; the least recently read go while the bounds are passed."""
        if not (is_terminal(task.status.state) and ended(record)) or task.id != record.task_id:
            return
        if since < self._floor or self._forgotten.get(task.id, -1) > since:
            return
        size = task.ByteSize()
        if size > self.max_bytes or not self.active:
            return
        self._drop(task.id)
        self._entries[task.id] = (task, record, size)
        self.bytes += size
        while len(self._entries) > self.max_tasks or self.bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def forget(self, task_ids: Iterable[str]) -> None:
        """Tasks a write (this process's or another replica's) may have changed."""
        for task_id in task_ids:
            self._epoch += 1
            self._drop(task_id)
            self._forgotten[task_id] = self._epoch
            self._forgotten.move_to_end(task_id)
            if len(self._forgotten) > FORGOTTEN:
                self._floor = self._forgotten.popitem(last=False)[1]

    def _drop(self, task_id: str) -> None:
        entry = self._entries.pop(task_id, None)
        if entry is not None:
            self.bytes -= entry[2]
            self._forget_json(task_id)

    def _forget_json(self, task_id: str) -> None:
        made = self._json.pop(task_id, None)
        if made is not None:
            self.json_bytes -= made[1]
