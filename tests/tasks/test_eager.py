"""`eager.shielded`: a coroutine started in the caller, finishing there when it never waits (no task made), and
otherwise going on in a task that a cancel of the caller does not interrupt, with what it waits for, raises and
returns handed through as `asyncio.shield` hands them."""

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from a2a_bridge.tasks import eager


def run(main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(main())


def tasks_made(loop: asyncio.AbstractEventLoop) -> list[Coroutine[Any, Any, Any]]:
    """Record the coroutine of every task the loop makes from here on."""
    made: list[Coroutine[Any, Any, Any]] = []

    def factory(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, Any], **kwargs: Any) -> asyncio.Task[Any]:
        made.append(coroutine)
        return asyncio.Task(coroutine, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    return made


def test_a_coroutine_that_never_waits_finishes_in_the_caller_without_a_task() -> None:
    steps: list[str] = []

    async def write() -> int:
        steps.append("written")
        return 7

    async def main() -> None:
        made = tasks_made(asyncio.get_running_loop())
        pending = eager.shielded(write())
        assert steps == []
        assert await pending == 7
        assert steps == ["written"]
        assert made == []

    run(main)


def test_its_error_reaches_the_caller_whether_it_waited_or_not() -> None:
    async def refuse(wait: bool) -> None:
        if wait:
            await asyncio.sleep(0)
        raise ValueError("refused")

    async def main() -> None:
        for wait in (False, True):
            with pytest.raises(ValueError, match="refused"):
                await eager.shielded(refuse(wait))

    run(main)


def test_a_coroutine_that_waits_goes_on_from_where_it_stopped_and_returns_what_it_was_sent() -> None:
    async def write(first: asyncio.Future[int], second: asyncio.Future[int], steps: list[str]) -> int:
        steps.append("started")
        a = await first
        steps.append("after first")
        await asyncio.sleep(0)
        b = await second
        return a + b

    async def main() -> None:
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        steps: list[str] = []
        made = tasks_made(loop)
        caller = asyncio.ensure_future(eager.shielded(write(first, second, steps)))
        await asyncio.sleep(0)
        assert steps == ["started"]
        assert len(made) == 2
        first.set_result(2)
        second.set_result(3)
        assert await caller == 5
        assert steps == ["started", "after first"]

    run(main)


def test_a_cancelled_caller_does_not_interrupt_a_write_that_waits() -> None:
    async def write(gate: asyncio.Event, steps: list[str]) -> None:
        steps.append("started")
        await gate.wait()
        steps.append("finished")

    async def main() -> None:
        gate, steps = asyncio.Event(), []
        caller = asyncio.ensure_future(eager.shielded(write(gate, steps)))
        await asyncio.sleep(0)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert steps == ["started"]
        gate.set()
        for _ in range(100):
            if steps[-1] == "finished":
                break
            await asyncio.sleep(0)
        assert steps == ["started", "finished"]

    run(main)


def test_what_its_task_throws_in_reaches_the_coroutine() -> None:
    """A future it waits for that is cancelled raises CancelledError inside the coroutine, which may handle it."""

    async def write(waited: asyncio.Future[None]) -> str:
        try:
            await waited
        except asyncio.CancelledError:
            return "handled"
        return "not reached"

    async def main() -> None:
        waited = asyncio.get_running_loop().create_future()
        caller = asyncio.ensure_future(eager.shielded(write(waited)))
        await asyncio.sleep(0)
        waited.cancel()
        assert await caller == "handled"

    run(main)
