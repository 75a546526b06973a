"""`MemoryTaskStore`, the tasks of `--store memory`, each kept as its protobuf encoding: a few hundred bytes where a
`Task` object holds a protobuf arena of over a kilobyte (issue 18: the memory store's RSS per finished task at most
the stock SDK's). Every read parses a fresh `Task`, so no caller shares what is stored (as the SDK's copying store).
Task ids are interned: the memory ledger keeps the same string for its record and its claim events.

It answers as the SDK's `InMemoryTaskStore` does: tasks by owner (the SDK's owner resolver); ListTasks filtered by
context, state and status time, newest status first (tasks without a timestamp last, ties by id, descending), in
pages whose token is the SDK's cursor naming the last task of the page before. A token that is not such a cursor is
refused (InvalidParamsError), as the SQL store refuses it: a memory store lives as long as its process, so it never
sees the task-id tokens of older SDK versions."""

import sys

from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import OwnerResolver, resolve_user_scope
from a2a.server.tasks import TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import ListTasksCursor, decode_list_tasks_cursor, encode_list_tasks_cursor

SortKey = tuple[bool, int, str]


def sort_key(task: Task) -> SortKey:
    """Where ListTasks puts a task, descending: (has a status timestamp, the timestamp in nanoseconds, id)."""
    stamped = task.HasField("status") and task.status.HasField("timestamp")
    return stamped, task.status.timestamp.ToNanoseconds() if stamped else 0, task.id


class MemoryTaskStore(TaskStore):
    """Each owner's tasks by id, as their protobuf encoding."""

    def __init__(self, owner_resolver: OwnerResolver = resolve_user_scope) -> None:
        self.owner_resolver = owner_resolver
        self._tasks: dict[str, dict[str, bytes]] = {}

    async def save(self, task: Task, context: ServerCallContext) -> None:
        self._tasks.setdefault(self.owner_resolver(context), {})[sys.intern(task.id)] = task.SerializeToString()

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        encoded = self._tasks.get(self.owner_resolver(context), {}).get(task_id)
        return None if encoded is None else Task.FromString(encoded)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        after = self._cursor(params.page_token) if params.page_token else None
        tasks = [Task.FromString(encoded) for encoded in self._tasks.get(self.owner_resolver(context), {}).values()]
        if params.context_id:
            tasks = [task for task in tasks if task.context_id == params.context_id]
        if params.status:
            tasks = [task for task in tasks if task.status.state == params.status]
        if params.HasField("status_timestamp_after"):
            since = params.status_timestamp_after.ToNanoseconds()
            tasks = [task for task in tasks if sort_key(task)[0] and task.status.timestamp.ToNanoseconds() >= since]
        keyed = sorted(((sort_key(task), task) for task in tasks), key=lambda pair: pair[0], reverse=True)
        start = 0 if after is None else next((i for i, (key, _) in enumerate(keyed) if key < after), len(keyed))
        size = params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
        page = keyed[start:start + size]
        response = ListTasksResponse(tasks=[task for _, task in page], total_size=len(keyed), page_size=size)
        if start + size < len(keyed):
            stamped, nanoseconds, task_id = page[-1][0]
            response.next_page_token = encode_list_tasks_cursor(
                ListTasksCursor(timestamp_ns=nanoseconds if stamped else None, task_id=task_id)
            )
        return response

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
