"""A shielded await whose coroutine starts at once, in the caller, as Python 3.12's eager tasks start: a coroutine
that finishes without waiting (a write to the memory store) costs no task and no trip through the event loop; one
that waits goes on from there in a task of its own, which a cancel of the caller does not interrupt.

Only for coroutines that do not hold on to the running task (`asyncio.timeout`, a `TaskGroup`): up to its first wait,
the running task is the caller's."""

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


@types.coroutine
def _resumed(coroutine: Coroutine[Any, Any, T], waiting: Any) -> Generator[Any, Any, T]:
    """Drive a started coroutine on from what it waits for (`waiting`, the future it yielded), as a task drives it:
    what the task sends or throws in goes on to the coroutine."""
    while True:
        try:
            sent = yield waiting
        except BaseException as error:
            try:
                waiting = coroutine.throw(error)
            except StopIteration as done:
                return done.value
        else:
            try:
                waiting = coroutine.send(sent)
            except StopIteration as done:
                return done.value


async def _rest(coroutine: Coroutine[Any, Any, T], waiting: Any) -> T:
    return await _resumed(coroutine, waiting)


def _retrieved(done: "asyncio.Future[Any]") -> None:
    """Mark a finished task's exception as retrieved: its caller, canceled first, never will."""
    if not done.cancelled():
        done.exception()


async def shield(coroutine: Coroutine[Any, Any, T]) -> T:
    """`await asyncio.shield(coroutine)`, whose failure is not reported as "Task exception was never retrieved" when
    the caller was canceled first (a save of a turn that a lost session or a cancel stopped: the writer has handled
    it, or the store's outage is logged once)."""
    task = asyncio.ensure_future(coroutine)
    task.add_done_callback(_retrieved)
    return await asyncio.shield(task)


async def shielded(coroutine: Coroutine[Any, Any, T]) -> T:
    """`shield(coroutine)`, with the coroutine run here up to its first wait."""
    try:
        waiting = coroutine.send(None)
    except StopIteration as done:
        return done.value
    return await shield(_rest(coroutine, waiting))
