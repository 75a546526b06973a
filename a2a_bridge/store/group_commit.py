"""Group commit: writes submitted while one transaction runs share the next one, so a busy server commits once for
many tasks instead of once per write; each writer still waits until its own write is committed."""

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
    ) -> None:
        self._write_many = write_many
        self._write_one = write_one
        self._pending: list[tuple[Item, asyncio.Future[Result]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def submit(self, item: Item) -> Result:
        """The item's result once the transaction that holds it has committed; a canceled caller does not stop it (the
        item is in the batch already: its future, canceled with the caller, is left unset)."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._drain())
        return await future

    def later(self, item: Item) -> "asyncio.Future[Result]":
        """The item's result once committed, written with the next batch that begins (started by another `submit` or
        by `flush`), not beginning one of its own."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        return future

    def flush(self) -> None:
        """Begin a batch for the items waiting (`later`), unless one runs already."""
        if self._pending and self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                await self._write(batch)
        finally:
            self._writer = None

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
        if self._writer is not None:
            await asyncio.shield(self._writer)


def _settle(future: "asyncio.Future[Result]", result: "Result | None" = None, error: Exception | None = None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]
