"""`MemoryTaskStore`, the tasks of `--store memory`, each kept as its protobuf encoding behind its status timestamp
(ListTasks orders by it): a few hundred bytes where a `Task` object holds a protobuf arena of over a kilobyte (issue
18: the memory store's RSS per finished task at most the stock SDK's). Every read parses a fresh `Task`, so no caller
shares what is stored (as the SDK's copying store). Task ids are interned: the memory ledger keeps the same string
for its record and its claim events.

It answers as the SDK's `InMemoryTaskStore` does: tasks by owner (the SDK's owner resolver); ListTasks filtered by
context, state and status time, newest status first (tasks without a timestamp last, ties by id, descending), in
pages whose token is the SDK's cursor naming the last task of the page before. A token that is not such a cursor is
refused (InvalidParamsError), as the SQL store refuses it: a memory store lives as long as its process, so it never
sees the task-id tokens of older SDK versions."""

import struct
import sys

from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import OwnerResolver, resolve_user_scope
from a2a.server.tasks import TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import ListTasksCursor, decode_list_tasks_cursor, encode_list_tasks_cursor

SortKey = tuple[bool, int, str]
STAMP = struct.Struct(">?qi")
"""Ahead of each encoding: whether the status has a timestamp, its seconds and nanos, so that ListTasks orders and
pages the tasks without parsing them (13 bytes; a `Task` parsed to read its timestamp took longer than the listing)."""


def encode(task: Task) -> bytes:
    stamped = task.HasField("status") and task.status.HasField("timestamp")
    stamp = task.status.timestamp
    return STAMP.pack(stamped, stamp.seconds, stamp.nanos) + task.SerializeToString()


def decode(encoded: bytes) -> Task:
    return Task.FromString(encoded[STAMP.size:])


def sort_key(task_id: str, encoded: bytes) -> SortKey:
    """Where ListTasks puts a task, descending: (has a status timestamp, the timestamp in nanoseconds, id)."""
    stamped, seconds, nanos = STAMP.unpack_from(encoded)
    return stamped, seconds * 1_000_000_000 + nanos if stamped else 0, task_id


class MemoryTaskStore(TaskStore):
    """Each owner's tasks by id, as their protobuf encoding behind their status timestamp."""

    def __init__(self, owner_resolver: OwnerResolver = resolve_user_scope) -> None:
        self.owner_resolver = owner_resolver
        self._tasks: dict[str, dict[str, bytes]] = {}

    async def save(self, task: Task, context: ServerCallContext) -> None:
        self._tasks.setdefault(self.owner_resolver(context), {})[sys.intern(task.id)] = encode(task)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        encoded = self._tasks.get(self.owner_resolver(context), {}).get(task_id)
        return None if encoded is None else decode(encoded)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        after = self._cursor(params.page_token) if params.page_token else None
        owned = self._tasks.get(self.owner_resolver(context), {})
        keyed = [(sort_key(task_id, encoded), encoded) for task_id, encoded in owned.items()]
        if params.HasField("status_timestamp_after"):
            since = params.status_timestamp_after.ToNanoseconds()
            keyed = [(key, encoded) for key, encoded in keyed if key[0] and key[1] >= since]
        if params.context_id or params.status:
            keyed = [(key, encoded) for key, encoded in keyed if self._holds(params, decode(encoded))]
        keyed.sort(key=lambda pair: pair[0], reverse=True)
        start = 0 if after is None else next((i for i, (key, _) in enumerate(keyed) if key < after), len(keyed))
        size = params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
        page = keyed[start:start + size]
        response = ListTasksResponse(tasks=[decode(encoded) for _, encoded in page], total_size=len(keyed), page_size=size)
        if start + size < len(keyed):
            stamped, nanoseconds, task_id = page[-1][0]
            response.next_page_token = encode_list_tasks_cursor(
                ListTasksCursor(timestamp_ns=nanoseconds if stamped else None, task_id=task_id)
            )
        return response

    @staticmethod
    def _holds(params: ListTasksRequest, task: Task) -> bool:
        """Whether a task passes a listing's context and state filters."""
        if params.context_id and task.context_id != params.context_id:
            return False
        return not params.status or task.status.state == params.status

    @staticmethod
    def _cursor(token: str) -> SortKey:
        cursor = decode_list_tasks_cursor(token)
        if cursor is None:
            raise InvalidParamsError("Invalid page token")
        return cursor.sort_key()

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        owner = self.owner_resolver(context)
        tasks = self._tasks.get(owner)
        if tasks is None:
            return
        tasks.pop(task_id, None)
        if not tasks:
            del self._tasks[owner]
