"""A process's session on PostgreSQL: the connection that holds its advisory lock for as long as the process lives
and, on that same connection, LISTENs for what the other replicas commit (its loss is the loss of the session); the
NOTIFY payloads the writes send at commit; and whether another session's process still lives."""

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, func, insert, literal, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from a2a_bridge.store.ledger import Request
from a2a_bridge.store.ledger_tables import SESSION_LOCKS, requests_table

CHANNEL = "a2a_bridge"
"""The NOTIFY channel of the replicas on one database; a payload is "<kind>:<task id>[:<detail>]" (`ledger.Notice`)."""
NOTIFY = text(f"SELECT pg_notify('{CHANNEL}', payload) FROM unnest(CAST(:payloads AS text[])) AS payload")
ALIVE = text(
    "SELECT CASE WHEN pg_try_advisory_lock(:ns, :id) THEN NOT pg_advisory_unlock(:ns, :id) ELSE true END"
)
"""Whether another session holds a session's lock, taking it (and giving it back) only where it is free."""
MAX_PAYLOAD = 7900
"""PostgreSQL refuses a NOTIFY payload of 8000 bytes or more: a logged event longer than this is announced without
its body (a "t" notice), and read from the log."""


def event_notices(logged: list[dict[str, Any]]) -> list[str]:
    """"e:<task id>:<seq>:<body>" for each event-log row (a save's events: `event_rows`) short enough to travel in its
    notice: a replica following the task hands them on without reading the log."""
    notices = (f"e:{row['task_id']}:{row['seq']}:{row['body']}" for row in logged)
    return [notice for notice in notices if len(notice.encode()) <= MAX_PAYLOAD]


def _request_notice() -> Select[Any]:
    added = (
        insert(requests_table)
        .values(task_id=bindparam("task_id"), kind=bindparam("kind"), requested_by=bindparam("requested_by"), at=bindparam("at"))
        .returning(requests_table.c.task_id)
        .cte("added")
    )
    return select(func.pg_notify(CHANNEL, literal("r:") + added.c.task_id)).select_from(added)


REQUEST_NOTICE = _request_notice()
"""One statement that stores a request for another replica and sends its "r" notice (at its commit); built once."""


def request_params(request: Request, at: datetime) -> dict[str, Any]:
    return {"task_id": request.task_id, "kind": request.kind, "requested_by": request.requested_by, "at": at}


async def session_alive(engine: AsyncEngine, session: int) -> bool:
    """Whether the process of a session still holds its lock: one statement, which takes the lock only where it is
    free and gives it back at once (an advisory lock of the session, not of a transaction)."""
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        return bool((await conn.execute(ALIVE, {"ns": SESSION_LOCKS, "id": session})).scalar_one())


class SessionConnection:
    """The connection of this process's session: its lock, its LISTEN, and the news of its loss."""

    def __init__(self, engine: AsyncEngine, heard: Callable[[int, str], None], lost: Callable[[], None]) -> None:
        """`heard` is called with the sending backend's process id and the payload of each notice."""
        self.engine = engine
        self.heard = heard
        self.lost = lost
        self._connection: AsyncConnection | None = None
        self._closing: asyncio.Future[None] | None = None
        """The close of a connection found terminated (kept so that it runs to its end)."""

    async def take(self, session: int) -> None:
        """Hold the lock of a (new) session generation and listen on its connection."""
        await self.drop()
        connection = await self.engine.connect()
        try:
            await connection.execute(text("SELECT pg_advisory_lock(:ns, :id)"), {"ns": SESSION_LOCKS, "id": session})
            await connection.commit()
            driver = (await connection.get_raw_connection()).driver_connection
            await driver.add_listener(CHANNEL, self._heard)
            driver.add_termination_listener(self._terminated)
        except BaseException:
            with contextlib.suppress(Exception):  # a connection that failed half-way: closed, whatever state it is in
                await connection.close()
            raise
        self._connection = connection

    async def drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):  # a lost connection may fail to close; it is gone either way
                driver = (await connection.get_raw_connection()).driver_connection
                driver.remove_termination_listener(self._terminated)
                await connection.close()

    def _heard(self, _connection: object, pid: int, _channel: str, payload: str) -> None:
        self.heard(pid, payload)

    def _terminated(self, _connection: object) -> None:
        """The session's connection is gone: it is closed (given back to the pool, not left to the garbage
        collector) and the loss reported."""
        self._closing = asyncio.ensure_future(self.drop())
        self.lost()
