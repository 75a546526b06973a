"""`a2a-bridge replay`: sends the requests of `.http` transcripts to live servers and compares every response.

Rules, in the order a transcript is played:

- Hosts: each block goes to the base URL `--map` gives for its `Host`; a Host without a mapping is an error before
  anything is sent. Recorded base URLs (`http://HOST`) in bodies, headers and texts stand for the mapped ones.
- Ids: a recorded UUID (task, context, message, push config, artifact id) or page token in a response is bound to the
  live value at the same place, one to one, across the whole run; every bound id in a later request is replaced by its
  live value before the request is sent. Files are played in the order given and share their ids (the kit's 12 lists
  the tasks of 03–10).
- Message ids: the server takes a `messageId` a caller sends again as a retry of that message and answers it with
  what the first send produced, so every `"messageId"` in a request body is given a fresh live value the first time
  the run meets it (a new UUID for a UUID, `ID-xxxxxxxx` otherwise), the same value for the rest of the run. A UUID is
  bound like any id, so the history entries and claim evidence that echo it compare as bound ids; any other value is
  bound as a whole string only. Replaying twice against one server therefore sends new messages each time; only
  what depends on the store's earlier content differs (12 counts and lists the earlier run's tasks too, which
  `capture/allow/rerun.toml` documents).
- Comparison: status line, media type and the other recorded headers (not Host, Date, Server, Content-Length), then
  the body as JSON (`a2a_bridge.capture.compare`: ids bound, timestamps as timestamps, numbers by value, objects unordered) or
  as text; a stream's events are compared in order as the list `$[0]`, `$[1]`, …
- Streams: a request recorded inside an open stream (07's approval) is sent once the stream has delivered the events
  recorded before it. A stream whose last recorded event ends it (a terminal state, INPUT_REQUIRED, a message, an
  error, a Task Status view whose phase is terminal) must then be closed by the server; any other stream was closed
  by the client (14), and the replayer closes it after the recorded number of events.
- Timing: a GetTask (JSON-RPC, or HTTP+JSON GET /tasks/{id}) whose recorded reply is a task is re-sent until the live
  task has the recorded state and as many parts in each artifact, or the deadline passes; the last reply is
  compared. Before a CancelTask or SubscribeToTask whose recorded reply shows the task's artifacts, the replayer
  polls GetTask until the live task holds at least the recorded parts of each artifact (10 cancels after two log
  files, 14 resubscribes after four).
- Webhooks: for a transcript with `webhook` blocks a receiver listens on 127.0.0.1, and every recorded URL whose
  path is a webhook block's path is rewritten to it. The replayer waits for the recorded number of deliveries (or
  the deadline) before it sends a request that deletes a push configuration, or at the end of the file, and
  compares them in order with the webhook blocks: method, path, media type, headers and body.
- A body is sent exactly as recorded, ids aside, so a malformed body (11 #7) stays malformed.
"""

import json
import re
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from a2a_bridge.capture.allowances import Allowed, AllowList
from a2a_bridge.capture.compare import UUID, Difference, Ids, compare, short
from a2a_bridge.capture.transcript import Block, Headers, Response, Transcript, TranscriptError, load

DEADLINE = 20.0
"""Seconds the replayer waits for a stream event, a task's progress or the webhooks."""
POLL_INTERVAL = 0.02
TRANSPORT_HEADERS = frozenset({"host", "content-length", "content-type", "date", "server", "transfer-encoding", "connection"})
"""Headers not compared field by field (Content-Type is compared by media type)."""
EXTRA_EVENTS = 50
"""How many events past the recorded ones are read before a stream that should have ended counts as open."""
ENDING_STATES = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_INPUT_REQUIRED",
    }
)
"""States at which a stream closes."""
_URL = re.compile(r"https?://[^\s\"'<>]+")
_REST_TASK = re.compile(r"^(?P<prefix>.*)/tasks/(?P<id>[^/:]+)(?P<verb>:[a-zA-Z]+)?$")
_MESSAGE_ID = re.compile(r'(?P<head>"messageId"\s*:\s*")(?P<id>[^"\\]*)"')


class UsageError(ValueError):
    """A command line the replayer cannot act on (exit 2)."""


@dataclass
class BlockResult:
    """The outcome of one block: differences that fail it and differences an allow entry documents."""

    file: str
    label: str
    title: str
    failures: list[Difference] = field(default_factory=list)
    allowed: list[tuple[Difference, Allowed]] = field(default_factory=list)
    seconds: float = 0.0
    narration: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def name(self) -> str:
        return f"{self.file} #{self.label} · {self.title}"


class Reporter(Protocol):
    """Where results go as they come."""

    def start(self, total: int) -> None: ...

    def report(self, result: BlockResult) -> None: ...

    def finish(self, results: Sequence[BlockResult], unused: Sequence[Allowed]) -> None: ...


class Quiet:
    """A reporter that shows nothing."""

    def start(self, total: int) -> None:
        return

    def report(self, result: BlockResult) -> None:
        return

    def finish(self, results: Sequence[BlockResult], unused: Sequence[Allowed]) -> None:
        return


@dataclass(frozen=True)
class Delivery:
    """One webhook request as the receiver got it."""

    method: str
    path: str
    headers: Headers
    body: bytes


class WebhookReceiver:
    """A small HTTP server on 127.0.0.1 that records every request and answers 200."""

    def __init__(self) -> None:
        self._deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                delivery = Delivery("POST", self.path, Headers(tuple(self.headers.items())), body)
                with receiver._lock:
                    receiver._deliveries.append(delivery)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="replay-webhooks", daemon=True)

    @property
    def base(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def received(self) -> list[Delivery]:
        with self._lock:
            return list(self._deliveries)

    def __enter__(self) -> "WebhookReceiver":
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class EventReader:
    """The `data:` payloads of a live SSE response, one event at a time."""

    def __init__(self, response: httpx.Response, deadline: float = DEADLINE) -> None:
        self._lines = response.iter_lines()
        self._deadline = deadline
        self.closed = False
        self.problem: str | None = None

    def next(self) -> Any | None:
        """The next event's JSON (or its text when it is not JSON); None once the stream has ended or timed out."""
        if self.closed:
            return None
        data: list[str] = []
        give_up = time.monotonic() + self._deadline
        try:
            for line in self._lines:
                if time.monotonic() > give_up:
                    self.problem = f"no event within {self._deadline:g} s"
                    break
                if line.startswith("data:"):
                    value = line[len("data:"):]
                    data.append(value[1:] if value.startswith(" ") else value)
                elif not line and data:
                    return _json_or_text("\n".join(data))
        except httpx.ReadTimeout:
            self.problem = f"no event within {self._deadline:g} s"
        except httpx.HTTPError as error:
            self.problem = f"the stream broke: {error}"
        self.closed = True
        return _json_or_text("\n".join(data)) if data else None

    def take(self, count: int) -> list[Any]:
        """Up to `count` events; fewer when the stream ends first."""
        events: list[Any] = []
        for _ in range(max(count, 0)):
            event = self.next()
            if event is None:
                break
            events.append(event)
        return events


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _payload(frame: Any) -> Any:
    """The A2A object in a frame or body: a JSON-RPC result, or the body itself (HTTP+JSON)."""
    if isinstance(frame, dict) and "jsonrpc" in frame:
        return frame.get("result")
    return frame


def ends_stream(frame: Any) -> bool:
    """Whether a recorded event is one after which the server closes the stream."""
    if isinstance(frame, dict) and "error" in frame:
        return True
    payload = _payload(frame)
    if not isinstance(payload, dict):
        return False
    if "message" in payload:
        return True
    if isinstance(payload.get("status"), dict) and payload["status"].get("phase") == "terminal":
        return True
    for key in ("statusUpdate", "task"):
        status = payload.get(key, {}).get("status", {}) if isinstance(payload.get(key), dict) else {}
        if status.get("state") in ENDING_STATES:
            return True
    return False


def progress(task: Any) -> tuple[str, dict[str, int]] | None:
    """A task's state and the number of parts in each artifact; None if it is not a task."""
    if not isinstance(task, dict) or "status" not in task or "id" not in task:
        return None
    parts = {str(a.get("artifactId")): len(a.get("parts", [])) for a in task.get("artifacts", []) if isinstance(a, dict)}
    return str(task["status"].get("state", "")), parts


def reached(live: tuple[str, dict[str, int]], wanted: dict[str, int]) -> bool:
    return all(live[1].get(artifact, 0) >= count for artifact, count in wanted.items())


def parse_maps(values: Sequence[str]) -> dict[str, str]:
    """`HOST:PORT=BASE_URL` pairs as a mapping from the lower-cased host to the base URL without a trailing slash."""
    maps: dict[str, str] = {}
    for value in values:
        host, sep, base = value.partition("=")
        if not sep or not host or not base.startswith(("http://", "https://")):
            raise UsageError(f"--map {value!r}: expected HOST:PORT=BASE_URL, e.g. localhost:41241=http://127.0.0.1:8000/test-runner")
        maps[host.strip().lower()] = base.rstrip("/")
    return maps


class Replayer:
    """Plays transcripts against mapped servers; one id binding for the whole run."""

    def __init__(
        self,
        maps: dict[str, str],
        allow: AllowList | None = None,
        reporter: Reporter | None = None,
        deadline: float = DEADLINE,
    ) -> None:
        self.maps = maps
        self.allow = allow or AllowList()
        self.reporter = reporter or Quiet()
        self.deadline = deadline
        self.ids = Ids({f"http://{host}": base for host, base in maps.items()})
        self.results: list[BlockResult] = []
        self.used: set[Allowed] = set()
        self.client = httpx.Client(timeout=httpx.Timeout(deadline, connect=5.0))

    def close(self) -> None:
        self.client.close()

    def check_hosts(self, scripts: Sequence[Transcript]) -> None:
        """Fail before sending anything when a block's Host has no mapping."""
        missing = sorted(
            {
                f"{script.name} #{block.label}: Host {block.request.host or '(none)'}"
                for script in scripts
                for block in script.exchanges
                if (block.request.host or "").lower() not in self.maps
            }
        )
        if missing:
            hosts = sorted({line.rsplit("Host ", 1)[1] for line in missing})
            raise UsageError(
                "no --map for " + ", ".join(hosts) + ": pass --map HOST:PORT=BASE_URL for each, e.g. "
                f"--map {hosts[0]}=http://127.0.0.1:8000/AGENT\n  " + "\n  ".join(missing)
            )

    def run(self, scripts: Sequence[Transcript]) -> list[BlockResult]:
        self.check_hosts(scripts)
        self.reporter.start(sum(len(script.blocks) for script in scripts))
        for script in scripts:
            self.play(script)
        self.reporter.finish(self.results, [entry for entry in self.allow.entries if entry not in self.used])
        return self.results

    def play(self, script: Transcript) -> None:
        """Replay one transcript's blocks in order."""
        if not script.webhooks:
            for block in script.exchanges:
                if block.during is None:
                    self._exchange(script, block)
            return
        with WebhookReceiver() as receiver:
            origins = webhook_origins(script)
            for origin in origins:
                self.ids.urls[origin] = receiver.base
            pending = True
            for block in script.exchanges:
                if block.during is not None:
                    continue
                if pending and deletes_push_config(block):
                    self._webhooks(script, receiver)
                    pending = False
                self._exchange(script, block)
            if pending:
                self._webhooks(script, receiver)
            for origin in origins:
                self.ids.urls.pop(origin, None)

    def _finish(self, script: Transcript, block: Block, differences: list[Difference], started: float) -> None:
        result = BlockResult(
            script.name, block.label, block.title, seconds=time.monotonic() - started,
            narration=tuple(note.text for note in block.narration),
        )
        for difference in differences:
            entry = self.allow.find(script.name, block.label, difference)
            if entry is None:
                result.failures.append(difference)
            else:
                self.used.add(entry)
                result.allowed.append((difference, entry))
        self.results.append(result)
        self.reporter.report(result)

    def _build(self, block: Block, target: str | None = None, body: str | None = None) -> httpx.Request:
        """The recorded request aimed at the mapped server, every bound id and recorded base URL replaced."""
        recorded = block.request
        base = self.maps[(recorded.host or "").lower()]
        headers = [
            (name, self.ids.translate(value))
            for name, value in recorded.headers
            if name.lower() not in ("host", "content-length")
        ]
        text = self.ids.translate(self.fresh_message_ids(recorded.body if body is None else body))
        url = base + self.ids.translate(recorded.target if target is None else target)
        return self.client.build_request(recorded.method, url, headers=headers, content=text.encode() if text else None)

    def fresh_message_ids(self, text: str) -> str:
        """The request text with each recorded messageId bound to a fresh live value, once per run (module docstring)."""

        def fresh(found: re.Match[str]) -> str:
            recorded = found["id"]
            if not recorded or recorded in self.ids:
                return found[0]
            if UUID.fullmatch(recorded):
                self.ids.bind(recorded, str(uuid.uuid4()))
                return found[0]
            live = self.ids.values.setdefault(recorded, f"{recorded}-{uuid.uuid4().hex[:8]}")
            return f'{found["head"]}{live}"'

        return _MESSAGE_ID.sub(fresh, text)

    def _exchange(self, script: Transcript, block: Block) -> None:
        started = time.monotonic()
        recorded = block.response
        if recorded is None:
            self._finish(script, block, [Difference("response", "missing", "the transcript records no response")], started)
            return
        try:
            self._wait_for_progress(block)
            if recorded.is_stream:
                differences = self._stream(script, block, recorded)
            else:
                differences = self._plain(block, recorded)
        except httpx.HTTPError as error:
            differences = [Difference("request", "error", f"{type(error).__name__}: {error}")]
        self._finish(script, block, differences, started)

    def _plain(self, block: Block, recorded: Response) -> list[Difference]:
        wanted = progress(_payload(_json_or_text(recorded.body))) if is_get_task(block) else None
        live = self.client.send(self._build(block))
        deadline = time.monotonic() + self.deadline
        while wanted is not None and time.monotonic() < deadline:
            current = progress(_payload(_json_or_text(live.text)))
            if current is None or current == wanted or current[0] in ENDING_STATES and current[0] != wanted[0]:
                break
            time.sleep(POLL_INTERVAL)
            live = self.client.send(self._build(block))
        return self._head(recorded, live) + self._body(recorded, live.text)

    def _head(self, recorded: Response, live: httpx.Response) -> list[Difference]:
        differences = []
        if (live.status_code, live.reason_phrase) != (recorded.status, recorded.reason):
            differences.append(
                Difference(
                    "status", "value", f"expected {recorded.status} {recorded.reason}, got {live.status_code} {live.reason_phrase}",
                    f"{recorded.status} {recorded.reason}", f"{live.status_code} {live.reason_phrase}",
                )
            )
        live_headers = Headers(tuple(live.headers.items()))
        if live_headers.media_type != recorded.headers.media_type:
            differences.append(
                Difference(
                    "headers.Content-Type", "value",
                    f"expected {recorded.headers.media_type}, got {live_headers.media_type}",
                    recorded.headers.media_type, live_headers.media_type,
                )
            )
        for name, value in recorded.headers:
            if name.lower() in TRANSPORT_HEADERS:
                continue
            expected, got = self.ids.translate(value), live_headers.get(name)
            if got != expected:
                differences.append(Difference(f"headers.{name}", "value", f"expected {expected!r}, got {got!r}", expected, got))
        return differences

    def _body(self, recorded: Response, text: str) -> list[Difference]:
        want = _json_or_text(recorded.body)
        if isinstance(want, str):
            expected = self.ids.translate(recorded.body).rstrip()
            if text.rstrip() != expected:
                return [Difference("body", "value", f"expected {short(expected)}, got {short(text)}", expected, text)]
            return []
        got = _json_or_text(text)
        if isinstance(got, str) and not isinstance(want, str):
            return [Difference("$", "type", f"expected JSON, got {short(text)}", want, text)]
        return compare(want, got, self.ids)

    def _stream(self, script: Transcript, block: Block, recorded: Response) -> list[Difference]:
        inside = [b for b in script.exchanges if b.during is not None and b.during.label == block.label]
        frames = recorded.frames_json()
        live = self.client.send(self._build(block), stream=True)
        try:
            head = self._head(recorded, live)
            if Headers(tuple(live.headers.items())).media_type != recorded.headers.media_type:
                live.read()
                for other in inside:
                    self._exchange(script, other)
                return head + [Difference("$", "type", f"expected a stream, got {short(live.text)}", frames, live.text)]
            reader = EventReader(live, self.deadline)
            events: list[Any] = []
            differences = list(head)

            def read(count: int) -> None:
                """Read up to `count` more events, comparing each as it comes so its ids are bound at once."""
                for event in reader.take(count):
                    index = len(events)
                    events.append(event)
                    if index < len(frames):
                        differences.extend(compare(frames[index], event, self.ids, path=f"$[{index}]"))
                    else:
                        differences.append(
                            Difference(f"$[{index}]", "unexpected item", f"unexpected event {short(event)}", None, event)
                        )

            for other in inside:
                assert other.during is not None
                read(other.during.frames - len(events))
                self._exchange(script, other)
            if frames and ends_stream(frames[-1]):
                read(len(frames) + EXTRA_EVENTS - len(events))
                if not reader.closed:
                    differences.append(Difference("$", "open", "the stream stayed open after the recorded events"))
            else:
                read(len(frames) - len(events))
        finally:
            live.close()
        for index in range(len(events), len(frames)):
            why = reader.problem or "the stream ended"
            differences.append(Difference(f"$[{index}]", "missing item", f"missing event ({why})", frames[index], None))
        return differences

    def _wait_for_progress(self, block: Block) -> None:
        """Before a cancel or resubscribe, wait until the live task has the parts the recorded reply shows."""
        recorded = block.response
        target = task_request(block)
        if recorded is None or target is None or target[0] not in ("CancelTask", "SubscribeToTask"):
            return
        reply = recorded.frames_json()[0] if recorded.is_stream and recorded.frames else _json_or_text(recorded.body)
        task = _payload(reply)
        if isinstance(task, dict) and "task" in task:
            task = task["task"]
        wanted = progress(task)
        if wanted is None or not wanted[1]:
            return
        deadline = time.monotonic() + self.deadline
        while time.monotonic() < deadline:
            current = progress(self._get_task(block, target[1]))
            if current is None or reached(current, wanted[1]) or current[0] in ENDING_STATES:
                return
            time.sleep(POLL_INTERVAL)

    def _get_task(self, block: Block, recorded_id: str) -> Any:
        """The live task, fetched with GetTask on the block's binding (its headers, its host)."""
        task_id = self.ids.translate(recorded_id)
        path = block.request.path
        rest = _REST_TASK.match(path)
        if rest is not None:
            request = self._build(block, target=f"{rest['prefix']}/tasks/{task_id}", body="")
            request = self.client.build_request("GET", request.url, headers=_without(request.headers, "content-type", "accept"))
        else:
            body = json.dumps({"jsonrpc": "2.0", "id": "replay-sync", "method": "GetTask", "params": {"id": task_id}})
            built = self._build(block, body=body)
            request = self.client.build_request("POST", built.url, headers=_without(built.headers, "accept", "content-length"), content=body.encode())
        return _payload(_json_or_text(self.client.send(request).text))

    def _webhooks(self, script: Transcript, receiver: WebhookReceiver) -> None:
        """Wait for the recorded number of deliveries (or the deadline), then compare them in order."""
        started = time.monotonic()
        expected = script.webhooks
        deadline = started + self.deadline
        while len(receiver.received()) < len(expected) and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL)
        deliveries = receiver.received()
        for index, block in enumerate(expected):
            if index >= len(deliveries):
                problem = f"not received within {self.deadline:g} s ({len(deliveries)} of {len(expected)} arrived)"
                self._finish(script, block, [Difference("request", "missing", problem)], started)
                continue
            differences = self._delivery(block, deliveries[index])
            if index == len(expected) - 1:
                differences += [
                    Difference(f"webhook[{extra}]", "unexpected item", f"an unrecorded webhook: {short(_json_or_text(d.body.decode()))}")
                    for extra, d in enumerate(deliveries[len(expected):], len(expected))
                ]
            self._finish(script, block, differences, started)

    def _delivery(self, block: Block, delivery: Delivery) -> list[Difference]:
        recorded = block.request
        differences = []
        expected_line = f"{recorded.method} {self.ids.translate(recorded.path)}"
        if f"{delivery.method} {delivery.path}" != expected_line:
            differences.append(Difference("request", "value", f"expected {expected_line}, got {delivery.method} {delivery.path}"))
        if delivery.headers.media_type != recorded.headers.media_type:
            differences.append(
                Difference("headers.Content-Type", "value", f"expected {recorded.headers.media_type}, got {delivery.headers.media_type}")
            )
        for name, value in recorded.headers:
            if name.lower() not in TRANSPORT_HEADERS:
                expected, got = self.ids.translate(value), delivery.headers.get(name)
                if got != expected:
                    differences.append(Difference(f"headers.{name}", "value", f"expected {expected!r}, got {got!r}", expected, got))
        return differences + compare(_json_or_text(recorded.body), _json_or_text(delivery.body.decode("utf-8", "replace")), self.ids)


def _without(headers: httpx.Headers, *names: str) -> list[tuple[str, str]]:
    return [(name, value) for name, value in headers.items() if name.lower() not in names]


def task_request(block: Block) -> tuple[str, str] | None:
    """(method, recorded task id) of a request about one task: GetTask, CancelTask or SubscribeToTask, either binding."""
    request = block.request
    rest = _REST_TASK.match(request.path)
    if rest is not None and "/a2a/jsonrpc" not in request.path:
        verb = {None: "GetTask", ":cancel": "CancelTask", ":subscribe": "SubscribeToTask"}.get(rest["verb"])
        return (verb, rest["id"]) if verb else None
    body = _json_or_text(request.body) if request.body else None
    if not isinstance(body, dict) or not isinstance(body.get("params"), dict):
        return None
    task_id = body["params"].get("id")
    method = body.get("method")
    if method in ("GetTask", "CancelTask", "SubscribeToTask") and isinstance(task_id, str):
        return str(method), task_id
    return None


def is_get_task(block: Block) -> bool:
    found = task_request(block)
    return found is not None and found[0] == "GetTask"


def deletes_push_config(block: Block) -> bool:
    request = block.request
    if request.method == "DELETE" and "pushNotificationConfigs" in request.path:
        return True
    body = _json_or_text(request.body) if request.body else None
    return isinstance(body, dict) and body.get("method") == "DeleteTaskPushNotificationConfig"


def webhook_origins(script: Transcript) -> list[str]:
    """The recorded origins (`http://host:port`) of every URL in a request whose path is a webhook block's path."""
    paths = {block.request.path for block in script.webhooks}
    origins: list[str] = []
    for block in script.exchanges:
        for url in _URL.findall(block.request.body):
            parts = urlsplit(url)
            origin = f"{parts.scheme}://{parts.netloc}"
            if parts.path in paths and origin not in origins:
                origins.append(origin)
    return origins


def write_junit(results: Sequence[BlockResult], path: Path) -> None:
    """One test suite per transcript, one test case per block; allowed differences go to system-out."""
    root = ET.Element("testsuites", name="a2a-bridge replay")
    suites: dict[str, ET.Element] = {}
    for result in results:
        suite = suites.get(result.file)
        if suite is None:
            suite = suites[result.file] = ET.SubElement(root, "testsuite", name=result.file)
        case = ET.SubElement(
            suite, "testcase", classname=result.file, name=f"#{result.label} · {result.title}", time=f"{result.seconds:.3f}"
        )
        if result.failures:
            failure = ET.SubElement(case, "failure", message=str(result.failures[0]), type="difference")
            failure.text = "\n".join(str(d) for d in result.failures)
        if result.allowed:
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(f"allowed {d} ({entry.reason})" for d, entry in result.allowed)
    for suite in suites.values():
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(1 for case in cases if case.find("failure") is not None)))
        suite.set("errors", "0")
    root.set("tests", str(sum(len(s.findall("testcase")) for s in suites.values())))
    root.set("failures", str(sum(int(s.get("failures", "0")) for s in suites.values())))
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def replay(
    files: Sequence[Path],
    maps: dict[str, str],
    allow: AllowList | None = None,
    junit: Path | None = None,
    reporter: Reporter | None = None,
    deadline: float = DEADLINE,
) -> list[BlockResult]:
    """Replay transcript files in order against the mapped servers; writes JUnit XML when asked."""
    try:
        scripts = [load(path) for path in files]
    except (OSError, TranscriptError) as error:
        raise UsageError(str(error)) from error
    replayer = Replayer(maps, allow, reporter, deadline)
    try:
        results = replayer.run(scripts)
    finally:
        replayer.close()
    if junit is not None:
        write_junit(results, junit)
    return results
