"""`SqlTaskStore`: the SDK's task store on SQLite or PostgreSQL, reading on a pool of its own and listing in keyset
pages.

ListTasks keeps the SDK's order (tasks with a status timestamp first, newest first, then by id, descending) and its
page tokens (the position of a page's last task), but reads each page as a range of an index that matches it
(owner, timestamp, id; with a context filter owner, context, timestamp, id), never the whole table: a page costs the
same at 100,000 tasks as at 1,000. `totalSize`, which the specification requires, is counted once and kept until a
write (this process's, or another replica's notice) may have changed what it counts."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from a2a.compat.v0_3.conversions import to_compat_task_status
from a2a.server.context import ServerCallContext
from a2a.server.models import TaskModel
from a2a.server.tasks import DatabaseTaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task, TaskState, TaskStatus
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import ListTasksCursor, decode_list_tasks_cursor, encode_list_tasks_cursor
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import Index, Table, func, select, tuple_
from sqlalchemy.engine import Connection
from sqlalchemy.schema import CreateIndex
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from a2a_bridge.store.store_faults import OUTAGE

Key = tuple[str, str, int, int | None]
"""What a count counts: owner, context id, status, status-timestamp lower bound (nanoseconds)."""
COUNTS = 1_024
"""Counts kept at most (by distinct filters); the oldest goes first."""


def listing_indexes(table: Table) -> list[Index]:
    """The indexes ListTasks pages read, declared on the table once (created where missing by `initialize`)."""
    name = table.name
    found = {index.name: index for index in table.indexes}
    wanted = {
        f"ix_{name}_owner_updated_id": ("owner", "last_updated", "id"),
        f"ix_{name}_owner_context_updated_id": ("owner", "context_id", "last_updated", "id"),
    }
    return [found.get(index) or Index(index, *(table.c[c] for c in columns)) for index, columns in wanted.items()]


def drop_redundant_indexes(table: Table) -> None:
    """Leave out of a task table's declaration the SDK's two indexes that others already serve, so that a table made
    from it lacks them: its index of `id` alone (the primary key's own index is the same) and `idx_*_owner_last_updated`
    (the first two columns of ListTasks' `ix_*_owner_updated_id`). Each is one more B-tree every save writes, and
    `last_updated` changes with every save. A table made before keeps them (no index is dropped under running
    replicas)."""
    prefix = f"idx_{table.name}_owner_last_updated"
    primary = [column.name for column in table.primary_key.columns]
    for index in list(table.indexes):
        if index.name == prefix or [column.name for column in index.columns] == primary:
            table.indexes.discard(index)


def _from_ns(timestamp_ns: int) -> datetime:
    """A cursor's nanoseconds as the naive UTC datetime the column holds (InvalidParamsError when out of range)."""
    timestamp = Timestamp()
    try:
        timestamp.FromNanoseconds(timestamp_ns)
        return timestamp.ToDatetime()
    except (OverflowError, ValueError) as e:
        raise InvalidParamsError("Invalid page token") from e


class SqlTaskStore(DatabaseTaskStore):
    """The SDK's store (its tables, rows and conversions; the bridge's ledger writes the rows) with `get` and `list`
    on `reader`, and `list` in keyset pages with `totalSize` kept between writes."""

    def __init__(
        self, engine: AsyncEngine, reader: AsyncEngine, model: type[TaskModel], to_task: Callable[[TaskModel], Task]
    ) -> None:
        super().__init__(engine, model_to_core_conversion=to_task)
        self.task_model = model
        self._reads = async_sessionmaker(reader, expire_on_commit=False)
        self._table: Table = model.__table__  # type: ignore[assignment]
        drop_redundant_indexes(self._table)
        self._indexes = listing_indexes(self._table)
        self._counts: OrderedDict[Key, int] = OrderedDict()
        self._writes = 0
        """Writes heard so far: a count read while one is heard is not kept."""

    async def initialize(self) -> None:
        if self._initialized:
            return
        await super().initialize()
        async with self.engine.begin() as conn:
            await conn.run_sync(self._create_indexes)

    def _create_indexes(self, conn: Connection) -> None:
        """Where missing (a table the SDK created before them); IF NOT EXISTS, as replicas may start together."""
        for index in self._indexes:
            conn.execute(CreateIndex(index, if_not_exists=True))

    def written(self, _task_ids: list[str]) -> None:
        """Tasks were written (any agent's: a notice names no table): the counts kept may be wrong now."""
        self._writes += 1
        self._counts.clear()

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        await self._ensure_initialized()
        model = self.task_model
        query = select(model).where(model.id == task_id, model.owner == self.owner_resolver(context))
        async with self._reads() as session:
            row = (await session.execute(query)).scalar_one_or_none()
            OUTAGE.answered()
            return self._from_orm(row) if row is not None else None

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        await self._ensure_initialized()
        owner = self.owner_resolver(context)
        cursor = self._cursor(params.page_token) if params.page_token else None
        size = params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
        async with self._reads() as session:
            rows = await self._page(session, params, owner, cursor, size + 1)
            total = await self._count(session, params, owner)
            tasks = [self._from_orm(row) for row in rows[:size]]
        OUTAGE.answered()
        following = encode_list_tasks_cursor(self._cursor_for(rows[size - 1])) if len(rows) > size else None
        return ListTasksResponse(tasks=tasks, total_size=total, next_page_token=following, page_size=size)

    @staticmethod
    def _cursor(token: str) -> ListTasksCursor:
        cursor = decode_list_tasks_cursor(token)
        if cursor is None:
            raise InvalidParamsError("Invalid page token")
        return cursor

    def _filters(self, params: ListTasksRequest, owner: str) -> list[Any]:
        model = self.task_model
        filters: list[Any] = [model.owner == owner]
        if params.context_id:
            filters.append(model.context_id == params.context_id)
        if params.status:
            names = [TaskState.Name(params.status), to_compat_task_status(TaskStatus(state=params.status)).state.value]
            filters.append(model.status["state"].as_string().in_(names))
        if params.HasField("status_timestamp_after"):
            filters.append(model.last_updated >= params.status_timestamp_after.ToDatetime())
        return filters

    async def _page(
        self, session: AsyncSession, params: ListTasksRequest, owner: str, cursor: ListTasksCursor | None, limit: int
    ) -> list[TaskModel]:
        """Up to `limit` rows after `cursor`: those with a timestamp (newest first), then those without (by id)."""
        model, filters = self.task_model, self._filters(params, owner)
        rows: list[TaskModel] = []
        if cursor is None or cursor.timestamp_ns is not None:
            stamped = [*filters, model.last_updated.is_not(None)]
            if cursor is not None and cursor.timestamp_ns is not None:
                after = (_from_ns(cursor.timestamp_ns), cursor.task_id)
                stamped.append(tuple_(model.last_updated, model.id) < tuple_(*after))
            query = select(model).where(*stamped).order_by(model.last_updated.desc(), model.id.desc()).limit(limit)
            rows += (await session.execute(query)).scalars().all()
        if len(rows) < limit and not params.HasField("status_timestamp_after"):
            unstamped = [*filters, model.last_updated.is_(None)]
            if cursor is not None and cursor.timestamp_ns is None:
                unstamped.append(model.id < cursor.task_id)
            query = select(model).where(*unstamped).order_by(model.id.desc()).limit(limit - len(rows))
            rows += (await session.execute(query)).scalars().all()
        return rows

    async def _count(self, session: AsyncSession, params: ListTasksRequest, owner: str) -> int:
        """The tasks the filters match, all pages together; counted once per change of the table."""
        after = params.status_timestamp_after.ToNanoseconds() if params.HasField("status_timestamp_after") else None
        key: Key = (owner, params.context_id, params.status, after)
        if key in self._counts:
            self._counts.move_to_end(key)
            return self._counts[key]
        writes = self._writes
        query = select(func.count()).select_from(self._table).where(*self._filters(params, owner))
        total = int((await session.execute(query)).scalar_one())
        if writes == self._writes:
            self._counts[key] = total
            if len(self._counts) > COUNTS:
                self._counts.popitem(last=False)
        return total
