"""`Mailbox`: items come out in the order they went in, a reader waits for the next one, and a cancelled wait takes
nothing from what arrives after it."""

import asyncio

import pytest

from a2a_bridge.tasks.mailbox import Mailbox


def test_items_come_out_in_order_and_a_reader_waits_for_the_next() -> None:
    async def main() -> None:
        box: Mailbox[int] = Mailbox()
        box.put_nowait(1)
        box.put_nowait(2)
        assert [await box.get(), await box.get()] == [1, 2]
        reader = asyncio.ensure_future(box.get())
        await asyncio.sleep(0)
        assert not reader.done()
        box.put_nowait(3)
        box.put_nowait(4)
        assert await asyncio.wait_for(reader, 5) == 3
        assert await box.get() == 4

    asyncio.run(main())


def test_a_cancelled_wait_takes_nothing() -> None:
    async def main() -> None:
        box: Mailbox[str] = Mailbox()
        reader = asyncio.ensure_future(box.get())
        await asyncio.sleep(0)
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        box.put_nowait("kept")
        assert await asyncio.wait_for(box.get(), 5) == "kept"

    asyncio.run(main())
