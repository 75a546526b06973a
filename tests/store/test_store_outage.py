"""A database outage through the wire: a server on a PostgreSQL cluster of the test's own, restarted (fast and
immediate) while clients call it on both JSON bindings. Every answer is a normal one or "store unavailable" (never
"Internal error"), everything answers normally once the database is back, a task started before the restart still
ends normally, and the log says the outage once, without tracebacks. Also which errors `store_faults.transient`
counts as transient, and how each binding renders StoreUnavailable."""

import asyncio
import glob
import os
import re
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import httpx
import pytest
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.utils.error_handlers import build_rest_error_payload
from asyncpg import exceptions as pg_errors
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_dbapi
from sqlalchemy.exc import DBAPIError, IntegrityError

from a2a_bridge.http.grpc_binding import status_code
from a2a_bridge.http.jsonrpc import sanitized
from a2a_bridge.http.rest_errors import cleaned, spec_status
from a2a_bridge.store.store_faults import StoreUnavailable, transient
from tests.claim_support import FULL_SUITE, UNIT_TESTS
from tests.support import A2A, ServerProcess, free_port, user_message, wait_for

PACE = 1.0
"""Seconds per step of the sample agents: a full suite runs about nine seconds, across the restart."""
UNKNOWN = "00000000-0000-4000-8000-000000000000"
"""A task id no task has: asking for it always reads the store."""
OUTAGE_LINES = 4
"""Lines of the outage's log at most (one when it begins, one when it ends, for a second episode if the restart's
last refused connection comes after the first answer)."""


# --- transient ---------------------------------------------------------------------------------------------------


def wrapped(error: Exception, invalidated: bool = False) -> DBAPIError:
    """The driver's error as SQLAlchemy's asyncpg dialect raises it: asyncpg's, adapted, wrapped in a DBAPIError."""
    integrity = isinstance(error, pg_errors.IntegrityConstraintViolationError)
    adapted_type = AsyncAdapt_asyncpg_dbapi.IntegrityError if integrity else AsyncAdapt_asyncpg_dbapi.Error
    try:
        try:
            raise error
        except Exception as driver:
            raise adapted_type(str(driver), driver) from driver
    except Exception as adapted:
        wrapper = DBAPIError.instance(
            "SELECT 1", {}, adapted, AsyncAdapt_asyncpg_dbapi.Error, connection_invalidated=invalidated
        )
        wrapper.__cause__ = adapted
        return wrapper


@pytest.mark.parametrize(
    "error",
    [
        pg_errors.CannotConnectNowError("the database system is starting up"),
        pg_errors.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        pg_errors.AdminShutdownError("terminating connection due to administrator command"),
        pg_errors.CrashShutdownError("terminating connection because of crash of another server process"),
        pg_errors.TooManyConnectionsError("sorry, too many clients already"),
        pg_errors.InterfaceError("connection is closed"),
        ConnectionRefusedError(111, "Connection refused"),
        ConnectionResetError(104, "Connection reset by peer"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_a_database_that_is_down_or_restarting_is_transient(error: Exception) -> None:
    assert transient(error)
    assert transient(wrapped(error))


def test_an_invalidated_connection_and_the_driver_interface_are_transient() -> None:
    assert transient(wrapped(pg_errors.PostgresError("lost"), invalidated=True))
    assert transient(wrapped(pg_errors.InterfaceError("cannot perform operation: connection is closed")))


@pytest.mark.parametrize(
    "error",
    [
        wrapped(pg_errors.UniqueViolationError("duplicate key value violates unique constraint")),
        wrapped(pg_errors.DataError("invalid input syntax")),
        wrapped(pg_errors.UndefinedTableError("relation does not exist")),
        ValueError("not a store fault"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_content_the_store_refuses_is_not_transient(error: Exception) -> None:
    assert not transient(error)


def test_the_wrapped_unique_violation_is_sqlalchemys_integrity_error() -> None:
    assert isinstance(wrapped(pg_errors.UniqueViolationError("duplicate")), IntegrityError)


# --- StoreUnavailable on each binding ----------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", [None, "t-1"])
def test_store_unavailable_on_each_binding(task_id: str | None) -> None:
    error = StoreUnavailable(task_id)
    kept = sanitized(error)
    assert kept is error
    answer = build_error_response(1, kept)["error"]
    assert answer["code"] == -32603 and "store unavailable" in answer["message"]
    assert answer["data"][0]["metadata"]["reason"] == "store unavailable"
    body, status = spec_status(cleaned(build_rest_error_payload(error), 500), 500)
    assert status == 503 and body["error"]["status"] == "UNAVAILABLE" and body["error"]["code"] == 503
    assert "store unavailable" in body["error"]["message"]
    assert body["error"]["details"][0]["metadata"]["reason"] == "store unavailable"
    assert status_code(error) == grpc.StatusCode.UNAVAILABLE


# --- a restarted database ----------------------------------------------------------------------------------------


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda path: [int(n) for n in re.findall(r"\d+", path)])
    return Path(found[-1]) if found else None


@dataclass
class Cluster:
    """A throwaway PostgreSQL cluster on a free loopback port, run as `postgres` when the tests run as root."""

    bin: Path
    root: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def run(self, *command: str) -> None:
        owner = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        subprocess.run([*owner, *command], check=True, capture_output=True, timeout=120)

    def ctl(self, *args: str) -> None:
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off"
        data, log = str(self.root / "data"), str(self.root / "log")
        self.run(str(self.bin / "pg_ctl"), "-D", data, "-l", log, "-w", "-t", "60", "-o", options, *args)

    def restart(self, mode: str) -> None:
        self.ctl("-m", mode, "restart")

    def database(self) -> str:
        """A new database on the cluster; its URL."""
        name = f"outage_{uuid.uuid4().hex[:12]}"

        async def create() -> None:
            connection = await asyncpg.connect(self.url)
            try:
                await connection.execute(f"CREATE DATABASE {name}")
            finally:
                await connection.close()

        asyncio.run(create())
        return self.url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Its own cluster, never the shared one: the tests restart it."""
    found = postgres_bin()
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must have PostgreSQL's binaries (/usr/lib/postgresql/*/bin): .ci/postgres installs them")
        pytest.skip("no PostgreSQL binaries in /usr/lib/postgresql/*/bin")
    root = Path(tempfile.mkdtemp(prefix="a2a-outage-pg-"))
    if os.getuid() == 0:
        shutil.chown(root, "postgres")
    cluster = Cluster(found, root, free_port())
    try:
        cluster.run(str(found / "initdb"), "-D", str(root / "data"), "-A", "trust", "-U", "postgres")
        cluster.ctl("start")
        yield cluster
    finally:
        if (root / "data" / "postmaster.pid").exists():
            cluster.ctl("-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


def jsonrpc(client: httpx.Client, base: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = client.post(f"{base}/a2a/jsonrpc", json=body, headers=A2A)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def first_frame(client: httpx.Client, base: str, task_id: str) -> dict[str, Any]:
    """SubscribeToTask's first answer: its first event, or the error answered in its place."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    with client.stream("POST", f"{base}/a2a/jsonrpc", json=body, headers=A2A) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            return response.read() and response.json()  # type: ignore[no-any-return]
        for line in response.iter_lines():
            if line.startswith("data:"):
                return httpx.Response(200, content=line[5:]).json()  # type: ignore[no-any-return]
    return {"error": {"code": 0, "message": "the stream closed without an event"}}


def rpc_verdict(answer: dict[str, Any], no_session: bool = False) -> str:
    """ok (a result or an A2A error of the task's own), unavailable ("store unavailable" with its reason), or what
    else it was."""
    if "result" in answer or answer["error"]["code"] in (-32001, -32002, -32004):
        return "ok"
    error = answer["error"]
    details = error.get("data") or [{}]
    reason = details[0].get("metadata", {}).get("reason")
    if error["code"] == -32603 and "store unavailable" in error["message"] and reason == "store unavailable":
        return "unavailable"
    if no_session and error["code"] == -32603 and reason == "no_session":
        return "ok"
    return f"bad: {error['code']} {error['message']} {reason}"


def rest_verdict(response: httpx.Response) -> str:
    if response.status_code in (200, 404):
        return "ok"
    error = response.json().get("error", {})
    if response.status_code == 503 and error.get("status") == "UNAVAILABLE" and "store unavailable" in error.get("message", ""):
        return "unavailable"
    return f"bad: {response.status_code} {error}"


class Traffic:
    """Clients calling the server until stopped, each answer judged (`rpc_verdict`, `rest_verdict`)."""

    def __init__(self, base: str, running: str, finished: str) -> None:
        self.base, self.running, self.finished = base, running, finished
        self.verdicts: Counter[tuple[str, str]] = Counter()
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self._loop, args=(call,)) for call in self._calls()]

    def _calls(self) -> list[Callable[[httpx.Client, int], tuple[str, str]]]:
        base = self.base

        def get(client: httpx.Client, n: int) -> tuple[str, str]:
            task_id = (self.running, self.finished, UNKNOWN)[n % 3]
            return "GetTask", rpc_verdict(jsonrpc(client, base, "GetTask", {"id": task_id}))

        def cancel(client: httpx.Client, n: int) -> tuple[str, str]:
            task_id = (self.finished, UNKNOWN)[n % 2]
            return "CancelTask", rpc_verdict(jsonrpc(client, base, "CancelTask", {"id": task_id}))

        def subscribe(client: httpx.Client, n: int) -> tuple[str, str]:
            return "SubscribeToTask", rpc_verdict(first_frame(client, base, (self.running, UNKNOWN)[n % 2]))

        def send(client: httpx.Client, n: int) -> tuple[str, str]:
            params = {"message": user_message(UNIT_TESTS, f"outage-{n}"), "configuration": {"returnImmediately": True}}
            return "SendMessage", rpc_verdict(jsonrpc(client, base, "SendMessage", params), no_session=True)

        def rest(client: httpx.Client, n: int) -> tuple[str, str]:
            task_id = (self.running, self.finished, UNKNOWN)[n % 3]
            response = client.get(f"{base}/a2a/rest/tasks/{task_id}", headers={"A2A-Version": "1.0"})
            return "HTTP+JSON GetTask", rest_verdict(response)

        return [get, cancel, subscribe, send, rest]

    def _loop(self, call: Callable[[httpx.Client, int], tuple[str, str]]) -> None:
        with httpx.Client(timeout=30) as client:
            n = 0
            while not self.stopped.is_set():
                n += 1
                try:
                    self.verdicts[call(client, n)] += 1
                except (httpx.HTTPError, ValueError, AssertionError) as error:
                    self.verdicts[(call.__name__, f"bad: {type(error).__name__} {error}")] += 1
                self.stopped.wait(0.02)

    def __enter__(self) -> "Traffic":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(60)

    def bad(self) -> dict[tuple[str, str], int]:
        return {key: count for key, count in self.verdicts.items() if key[1].startswith("bad")}


def start_task(base: str, text: str, blocking: bool = False) -> dict[str, Any]:
    params = {"message": user_message(text, f"outage-{uuid.uuid4()}"), "configuration": {"returnImmediately": not blocking}}
    with httpx.Client(timeout=60) as client:
        answer = jsonrpc(client, base, "SendMessage", params)
    assert "result" in answer, answer
    return answer["result"]["task"]  # type: ignore[no-any-return]


def state(base: str, task_id: str) -> str | None:
    with httpx.Client(timeout=30) as client:
        answer = jsonrpc(client, base, "GetTask", {"id": task_id})
    return answer["result"]["status"]["state"] if "result" in answer else None


def answers_normally(base: str, running: str) -> bool:
    """Every kind of call answers as it would without an outage."""
    with httpx.Client(timeout=30) as client:
        params = {"message": user_message(UNIT_TESTS, f"outage-{uuid.uuid4()}"), "configuration": {"returnImmediately": True}}
        calls = [
            "result" in jsonrpc(client, base, "GetTask", {"id": running}),
            jsonrpc(client, base, "GetTask", {"id": UNKNOWN}).get("error", {}).get("code") == -32001,
            jsonrpc(client, base, "CancelTask", {"id": UNKNOWN}).get("error", {}).get("code") == -32001,
            "result" in jsonrpc(client, base, "SendMessage", params),
            client.get(f"{base}/a2a/rest/tasks/{running}", headers={"A2A-Version": "1.0"}).status_code == 200,
            "result" in first_frame(client, base, running) or state(base, running) == "TASK_STATE_COMPLETED",
        ]
    return all(calls)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_database_restart_is_answered_store_unavailable_and_logged_once(cluster: Cluster, mode: str, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = ServerProcess(cluster.database(), pace=PACE, log=log).start()
    try:
        base = server.agent("test-runner")
        finished = start_task(base, UNIT_TESTS, blocking=True)["id"]
        running = start_task(base, FULL_SUITE)["id"]
        wait_for(lambda: state(base, running) == "TASK_STATE_WORKING", timeout=30, what="the full suite to run")
        with Traffic(base, running, finished) as traffic:
            wait_for(lambda: sum(traffic.verdicts.values()) >= 20, timeout=30, what="traffic before the restart")
            cluster.restart(mode)
            wait_for(lambda: answers_normally(base, running), 60, 0.5, "normal answers after the restart")
        assert traffic.bad() == {}, traffic.verdicts
        ended = wait_for(
            lambda: (s := state(base, running)) in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED") and s,
            timeout=90, what="the task started before the restart to end",
        )
        assert ended == "TASK_STATE_COMPLETED"
    finally:
        server.stop()
    text = log.read_text()
    assert "Traceback" not in text, text
    assert "Task exception was never retrieved" not in text, text
    assert "Internal error'" not in text, text
    outage = [line for line in text.splitlines() if "a2a_bridge.store.store_faults" in line]
    assert len(outage) <= OUTAGE_LINES, outage
