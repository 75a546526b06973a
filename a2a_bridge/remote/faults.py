"""Failures of calls to a remote agent (`serve --remote`): what went wrong in the bridge's own words (`classify`), and
`Patience`, the bounded retries of one call, run by tenacity (docs/remote.md, Failures)."""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NoReturn, ParamSpec, TypeVar

import httpx
from a2a.client import A2AClientError
from a2a.utils.errors import A2AError, TaskNotFoundError, UnsupportedOperationError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_any,
    wait_exponential,
)

from a2a_bridge.core.states import UnknownStateError

FIRST_BACKOFF = 0.25
MAX_BACKOFF = 2.0
MAX_ATTEMPTS = 40
"""Retries of one failing call, on top of the time bound (`--remote-timeout` after the first failure)."""
T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True)
class Problem:
    """One failed call to the remote agent, in our own words."""

    detail: str
    transient: bool
    network: bool = False
    """The remote agent could not be reached or stopped answering (rather than answering wrongly)."""
    undelivered: bool = False
    """The request never reached the remote agent (the connection could not be made): sending it again is safe."""
    vanished: bool = False


class RemoteFailure(Exception):
    """The turn cannot go on: `text` is the status message our task ends with."""

    def __init__(self, text: str, detail: str) -> None:
        super().__init__(text)
        self.text = text
        self.detail = detail


def classify(error: BaseException, timeout: float) -> Problem:
    """What went wrong, without the exception's own text (it may name hosts, paths or internals)."""
    if isinstance(error, TaskNotFoundError):
        return Problem("the remote task no longer exists", transient=False, vanished=True)
    if isinstance(error, UnsupportedOperationError):
        return Problem("it refused the operation", transient=True)
    if isinstance(error, UnknownStateError):
        return Problem("it reported a task state the bridge does not know", transient=False)
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, httpx.ConnectError | httpx.ConnectTimeout):
            return Problem("the connection could not be made", transient=True, network=True, undelivered=True)
        if isinstance(cause, httpx.TimeoutException):
            return Problem(f"no answer within {timeout:g} s", transient=True, network=True)
        if isinstance(cause, httpx.HTTPStatusError):
            status = cause.response.status_code
            return Problem(f"it answered HTTP {status}", transient=status >= 500 or status == 429)
        if isinstance(cause, httpx.TransportError):
            return Problem("the connection dropped", transient=True, network=True)
        cause = cause.__cause__
    if isinstance(error, A2AError) and not isinstance(error, A2AClientError):
        return Problem(f"it answered with an error ({type(error).__name__})", transient=False)
    return Problem("it sent a response the bridge cannot read", transient=False)


class Transient(Exception):
    """A failed call worth another attempt."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.detail)
        self.problem = problem


class Patience:
    """Bounded retries, run by tenacity: a failing call is retried with backoff (FIRST_BACKOFF doubling to MAX_BACKOFF,
    never past the time left) for at most `timeout` seconds after the first failure in a row and at most MAX_ATTEMPTS
    times; each `retry` starts the count again."""

    def __init__(self, agent: str, timeout: float) -> None:
        self.agent = agent
        self.timeout = timeout
        self.since: float | None = None
        """When the first failure in a row of this `retry` happened."""
        self.backoff = wait_exponential(multiplier=FIRST_BACKOFF, max=MAX_BACKOFF)

    async def retry(self, call: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """What the coroutine function `call` returns, called again while it raises Transient; RemoteFailure once time
        or attempts run out."""
        self.since = None
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(Transient),
            after=self._failed,
            wait=self._wait,
            stop=stop_any(stop_after_attempt(MAX_ATTEMPTS), self._out_of_time),
            retry_error_callback=self._give_up,
        )
        return await retrying(call, *args, **kwargs)

    def failure(self, problem: Problem) -> Exception:
        """What a failed call raises: Transient to be tried again, RemoteFailure when the problem is permanent."""
        if problem.transient:
            return Transient(problem)
        return RemoteFailure(f"The remote agent {self.agent} failed: {problem.detail}.", problem.detail)

    def budget(self) -> float:
        """Seconds the next call may take: the timeout, or what is left of it while failures repeat."""
        if self.since is None:
            return self.timeout
        return max(0.1, self._left())

    def _left(self) -> float:
        assert self.since is not None
        return self.since + self.timeout - asyncio.get_running_loop().time()

    def _failed(self, state: RetryCallState) -> None:
        if self.since is None:
            self.since = asyncio.get_running_loop().time()

    def _wait(self, state: RetryCallState) -> float:
        return max(0.0, min(self.backoff(state), self._left()))

    def _out_of_time(self, state: RetryCallState) -> bool:
        return self._left() <= 0

    def _give_up(self, state: RetryCallState) -> NoReturn:
        assert state.outcome is not None
        error = state.outcome.exception()
        assert isinstance(error, Transient)
        problem = error.problem
        verdict = "is unreachable" if problem.network else "keeps failing"
        raise RemoteFailure(
            f"The remote agent {self.agent} {verdict}: {problem.detail} (retried for {self.timeout:g} s).",
            problem.detail,
        )
