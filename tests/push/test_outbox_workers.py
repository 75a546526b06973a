"""The outbox's runs on long-lived workers, their settles and drops written with the ledger's next group commit and not
waited for: a process that dies after a post, before the drop of its delivery commits, leaves the row as it was, and
the next process sends the same events again, with the same ids, in order: none is lost."""

import asyncio
from pathlib import Path

import httpx

from a2a_bridge.capture.replay import WebhookReceiver
from a2a_bridge.push.workers import Workers
from a2a_bridge.store.push_rows import Change, Drop
from tests.push.test_outbox_rows import bridge_on, pushed, rpc
from tests.support import A2A, eventually

TERMINAL = b"TASK_STATE_COMPLETED"


def sent(receiver: WebhookReceiver) -> list[tuple[int, str, bool]]:
    """Each post's revision, webhook-id and whether it carried the task's end, in the order received."""
    return [
        (int(d.headers.get("a2a-task-revision") or 0), d.headers.get("webhook-id") or "", TERMINAL in d.body)
        for d in receiver.received()
    ]


def test_a_drop_lost_with_its_process_sends_the_events_again_with_the_same_ids(tmp_path: Path) -> None:
    """The first process posts every event of a task, its end included, and dies before the drop of the delivery's
    row commits (the drop is never written); the next process on the same file sends the events after the row's
    revision again, in order, each with the id it had, and drops the row once the end is delivered."""

    async def check() -> None:
        database = tmp_path / "bridge.db"
        with WebhookReceiver() as receiver:
            first = bridge_on(database)
            ledger = first.ledger
            written = ledger.later

            def dies_before_the_drop(change: Change) -> "asyncio.Future[bool]":
                if isinstance(change, Drop):
                    return asyncio.get_running_loop().create_future()  # never written: the process is gone
                return written(change)

            ledger.later = dies_before_the_drop  # type: ignore[method-assign]
            app = first.app()
            async with first.lifespan(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://bridge.test", headers=A2A, timeout=30
            ) as client:
                answer = (await rpc(client, "SendMessage", pushed(receiver))).json()
                task_id = answer["result"]["task"]["id"]
                await eventually(lambda: any(end for _, _, end in sent(receiver)), "the end posted by the first process")
            before = sent(receiver)
            assert [end for _, _, end in before].count(True) == 1, before
            rows = await bridge_on(database).ledger.deliveries("test-runner", task_id=task_id)
            assert len(rows) == 1 and rows[0].delivered < before[-1][0], rows

            second = bridge_on(database)
            app = second.app()
            async with second.lifespan(app):
                host = second.agents["test-runner"].host
                assert host.push is not None
                await eventually(lambda: len(sent(receiver)) > len(before), "the posts of the next process")
                await host.push.drain()
                assert await second.ledger.deliveries("test-runner", task_id=task_id) == []
            again = sent(receiver)[len(before):]
        ids = {revision: webhook_id for revision, webhook_id, _ in before}
        assert [revision for revision, _, _ in again] == sorted(revision for revision, _, _ in again), again
        assert again[-1][2], "the end is sent again, last"
        assert all(ids[revision] == webhook_id for revision, webhook_id, _ in again), (before, again)
        assert {revision for revision, _, _ in again} == {r for r, _, _ in before if r > rows[0].delivered}

    asyncio.run(check())


def test_workers_take_the_queued_jobs_in_turn_and_stop_within_their_grace() -> None:
    """Jobs queued while the workers are busy are taken by the first free worker, at most `most` run at once; a
    failing job does not stop its worker; a stop drops the jobs queued and cancels those past the grace."""

    async def check() -> None:
        done: list[int] = []
        running = 0
        most = 0
        gate = asyncio.Event()

        async def work(job: int) -> None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            try:
                if job == 3:
                    raise RuntimeError("a job's own failure")
                if job < 100:
                    await gate.wait()
                done.append(job)
            finally:
                running -= 1

        workers: Workers[int] = Workers(work, 2)
        for job in range(6):
            workers.put(job)
        await asyncio.sleep(0)
        assert running == 2 and most == 2
        gate.set()
        while len(done) < 5:
            await asyncio.sleep(0)
        assert sorted(done) == [0, 1, 2, 4, 5] and most == 2
        workers.put(100)
        while len(done) < 6:
            await asyncio.sleep(0)
        gate.clear()
        workers.put(7)
        workers.put(8)
        workers.put(9)
        await asyncio.sleep(0)
        await workers.stop(0.05)
        assert done[-1] == 100 and running == 0, done

    asyncio.run(check())
