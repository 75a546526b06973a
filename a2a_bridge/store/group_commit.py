"""Group commit: writes submitted while one transaction runs share the next one, so a busy server commits once for
many tasks instead of once per write; each writer still waits until its own write is committed. Writes left for
later ride along with the next batch another write begins, or one begun `linger` seconds on at the most."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class GroupCommit(Generic[Item, Result]):
    """Runs `write_many` on every item submitted since the last batch began; a batch that fails (of one item too) is
    written again one item at a time with `write_one`, so one bad write fails alone and `write_one` may recover one
    (a message another replica inserted meanwhile)."""

    def __init__(
        self,
        write_many: Callable[[list[Item]], Awaitable[list[Result]]],
        write_one: Callable[[Item], Awaitable[Result]],
        linger: float = 0.05,
    ) -> None:
        self._write_many = write_many
        self._write_one = write_one
        self._linger = linger
        self._pending: list[tuple[Item, asyncio.Future[Result]]] = []
        self._asked = 0
        """Items pending that were submitted (not left for later): each begins a batch."""
        self._writer: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    async def submit(self, item: Item) -> Result:
        """The item's result once the transaction that holds it has committed; a canceled caller does not stop it (the
        item is in the batch already: its future, canceled with the caller, is left unset)."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        self._asked += 1
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._drain())
        return await future

    def later(self, item: Item) -> "asyncio.Future[Result]":
        """The item's result once committed, written with the next batch another `submit` begins, or `flush` or
        `linger` seconds do: a batch running or ending never begins another for it alone."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._writer is None:
            self._wait()
        return future

    def _wait(self) -> None:
        """Begin a batch for the items left for later within `linger` seconds, unless a timer is set already."""
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._linger, self.flush)

    def flush(self) -> None:
        """Begin a batch for the items waiting (`later`), unless one runs already."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending and self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        """Write what is pending, and again while items submitted meanwhile wait; items left for later alone wait for
        the next batch begun (`_wait`)."""
        try:
            while True:
                batch, self._pending, self._asked = self._pending, [], 0
                await self._write(batch)
                if not self._asked:
                    break
        finally:
            self._writer = None
            if self._pending:
                self._wait()

    async def _write(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        try:
            results = await self._write_many([item for item, _ in batch])
        except Exception:  # noqa: BLE001 - retried item by item; a writer gets the error of its own item
            for item, future in batch:
                try:
                    _settle(future, await self._write_one(item))
                except Exception as alone:  # noqa: BLE001 - the writer of this item gets it
                    _settle(future, error=alone)
            return
        for (_, future), result in zip(batch, results, strict=True):
            _settle(future, result)

    async def close(self) -> None:
        """Wait for the writes already submitted (those left for a later batch too)."""
        self.flush()
        while self._writer is not None:
            await asyncio.shield(self._writer)
            self.flush()


def _settle(future: "asyncio.Future[Result]", result: "Result | None" = None, error: Exception | None = None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]
