"""What `a2a-bridge serve` checks before it starts: every address it will listen on can be bound, and the store opens.
Each failure is a `CannotStart` of one line, told to the operator instead of uvicorn's tracebacks."""

import asyncio
import socket

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from a2a_bridge.store.stores import Stores

STORE_TIMEOUT = 10.0
"""Seconds the store may take to answer at start-up."""


class CannotStart(Exception):
    """Why the server cannot start, in one line."""


def check_port(host: str, port: int, what: str) -> None:
    """Bind every address `host` names at `port` as the server will (then let it go), or raise CannotStart."""
    if port == 0:
        return
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise CannotStart(f"cannot listen on {host} ({what}): {error.strerror}") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as error:
                raise CannotStart(f"cannot listen on {host}:{port} ({what}): {error.strerror or error}") from None


def first_line(error: BaseException) -> str:
    """The error's own first line: a database error's without SQLAlchemy's statement and link."""
    cause = error.orig if isinstance(error, DBAPIError) and error.orig is not None else error
    lines = str(cause).strip().splitlines()
    return lines[0] if lines else type(cause).__name__


async def check_store(stores: Stores, timeout: float = STORE_TIMEOUT) -> None:
    """Connect to the store and run one query, or raise CannotStart naming it (never its password) and why."""
    if stores.engine is None:
        return
    where = stores.engine.url.render_as_string(hide_password=True).replace("+aiosqlite", "").replace("+asyncpg", "")
    try:
        async with asyncio.timeout(timeout):
            async with stores.engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
    except TimeoutError:
        raise CannotStart(f"cannot open the store {where}: no answer within {timeout:g} s") from None
    except Exception as error:  # noqa: BLE001 - any failure to open the store stops the start, told in one line
        raise CannotStart(f"cannot open the store {where}: {first_line(error)}") from None
