"""The retry policy of calls to a remote agent (`Patience`, docs/remote.md, Failures): a permanent problem fails at
once; a transient one is retried with backoff from 0.25 s, for at most the timeout after the first failure in a row and
at most MAX_ATTEMPTS times; each call may take only what is left of the timeout."""

import asyncio

import pytest

from a2a_bridge.remote.faults import FIRST_BACKOFF, MAX_ATTEMPTS, Patience, Problem, RemoteFailure

DROPPED = Problem("the connection dropped", transient=True, network=True)
REFUSED = Problem("it answered HTTP 404", transient=False)
BUSY = Problem("it answered HTTP 503", transient=True)


class Calls:
    """A call that fails with `problem` `failures` times (forever by default), then returns "done"."""

    def __init__(self, patience: Patience, problem: Problem, failures: int = 10**6) -> None:
        self.patience = patience
        self.problem = problem
        self.failures = failures
        self.times: list[float] = []
        self.budgets: list[float] = []

    async def __call__(self) -> str:
        self.times.append(asyncio.get_running_loop().time())
        self.budgets.append(self.patience.budget())
        if len(self.times) <= self.failures:
            raise self.patience.failure(self.problem)
        return "done"


def test_a_permanent_problem_fails_at_once() -> None:
    patience = Patience("js", 5.0)
    calls = Calls(patience, REFUSED)
    with pytest.raises(RemoteFailure) as failure:
        asyncio.run(patience.retry(calls))
    assert failure.value.text == "The remote agent js failed: it answered HTTP 404."
    assert len(calls.times) == 1


def test_transient_failures_are_retried_with_doubling_backoff_and_a_shrinking_budget() -> None:
    patience = Patience("js", 5.0)
    calls = Calls(patience, BUSY, failures=2)
    assert asyncio.run(patience.retry(calls)) == "done"
    first, second, third = calls.times
    assert second - first >= FIRST_BACKOFF
    assert third - second >= 2 * FIRST_BACKOFF
    assert calls.budgets[0] == 5.0
    assert calls.budgets[2] < 5.0 - 3 * FIRST_BACKOFF + 0.01


def test_retries_stop_at_the_timeout_after_the_first_failure() -> None:
    patience = Patience("js", 1.0)
    calls = Calls(patience, DROPPED)
    with pytest.raises(RemoteFailure) as failure:
        asyncio.run(patience.retry(calls))
    assert failure.value.text == (
        "The remote agent js is unreachable: the connection dropped (retried for 1 s)."
    )
    assert calls.times[-1] - calls.times[0] >= 1.0 - 0.01
    assert 2 <= len(calls.times) <= 5


def test_retries_stop_after_max_attempts_and_a_new_retry_counts_again() -> None:
    patience = Patience("js", 60.0)
    patience.backoff = lambda state: 0.0
    calls = Calls(patience, BUSY)
    with pytest.raises(RemoteFailure) as failure:
        asyncio.run(patience.retry(calls))
    assert failure.value.text == "The remote agent js keeps failing: it answered HTTP 503 (retried for 60 s)."
    assert len(calls.times) == MAX_ATTEMPTS
    again = Calls(patience, BUSY, failures=MAX_ATTEMPTS - 1)
    assert asyncio.run(patience.retry(again)) == "done"
    assert again.budgets[0] == 60.0
