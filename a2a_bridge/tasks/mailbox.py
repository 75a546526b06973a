"""`Mailbox`: what a listener is fed, for its one reader; `asyncio.Queue`'s `put_nowait` and `get` without the rest
of a queue (bounds, `join`'s accounting, several getters), a fifth of the work to make and to feed."""

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Mailbox(Generic[T]):
    """An unbounded first-in first-out queue with one reader."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: T) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> T:
        """The oldest item, once there is one; a cancelled wait takes nothing."""
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()
