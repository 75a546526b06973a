"""Logs and traces of `a2a-bridge serve`: the task a log line is about (in the plain text line, or as fields of the
JSON line under `--log-json`), and OpenTelemetry under `--trace`.

The task fields come from a context variable: `TaskHost` sets it around a turn, a cancel, a reconcile and a recovery
(`about_task` … `left_task`), so every line logged while it works on a task (its own, the agent's, the SDK's, the
webhook sender's) carries `task_id`, `agent` and `claim_generation`; under `--log-json` a request whose path names a
task carries them too (`a2a_bridge.http.task_paths`), so the server's request log line does.

This module imports nothing of the SDK: `a2a_bridge/__init__.py` calls `sdk_tracing_from_argv` before the SDK is
imported, because the SDK reads `OTEL_INSTRUMENTATION_A2A_SDK_ENABLED` once, at import.
"""

import argparse
import contextvars
import json
import logging
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

SDK_TRACING = "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"
TRACE_FLAG = "--trace"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(task)s %(message)s"
TASK_FIELDS = ("task_id", "agent", "claim_generation")
OTLP_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

log = logging.getLogger("a2a_bridge.tasks")


class TaskScope(NamedTuple):
    """The task the current code works on; `generation` reads its claim generation when a line is logged."""

    agent: str
    task_id: str
    generation: Callable[[], int | None]


_scope: contextvars.ContextVar[TaskScope | None] = contextvars.ContextVar("a2a_bridge_task", default=None)

Token = contextvars.Token[TaskScope | None]


def about_task(agent: str, task_id: str, generation: Callable[[], int | None], note: str | None = None) -> Token:
    """Mark what runs from here on (and the asyncio tasks it starts) as work on this task; logs `note` if given.
    Pair with `left_task`."""
    token = _scope.set(TaskScope(agent, task_id, generation))
    if note is not None:
        log.info(note)
    return token


def left_task(token: Token, note: str | None = None) -> None:
    """End the scope `about_task` opened, after logging `note` if given."""
    if note is not None:
        log.info(note)
    _scope.reset(token)


def current_task() -> TaskScope | None:
    return _scope.get()


class TaskFields(logging.Filter):
    """Sets `task_id`, `agent` and `claim_generation` on each record logged inside a task's scope."""

    def filter(self, record: logging.LogRecord) -> bool:
        scope = _scope.get()
        if scope is not None:
            record.task_id = scope.task_id
            record.agent = scope.agent
            try:
                record.claim_generation = scope.generation()
            except Exception:  # a log line must never fail on its context
                record.claim_generation = None
        return True


MAX_TARGET_SHOWN = 512
"""Characters of a request's path and query (or a gRPC method) an access line shows; a longer one is cut, and the
line says how long it was."""
ACCESS_LOGGERS = frozenset({"uvicorn.access", "a2a_bridge.grpc.access"})


def shown_target(text: str) -> str:
    """A request target as an access line shows it: at most MAX_TARGET_SHOWN characters."""
    if len(text) <= MAX_TARGET_SHOWN:
        return text
    return f"{text[:MAX_TARGET_SHOWN]}... ({len(text)} characters)"


class AccessTargets(logging.Filter):
    """Cuts what a caller chose in an access line (a 20,000-character path was written in full) to
    MAX_TARGET_SHOWN characters."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name in ACCESS_LOGGERS and isinstance(record.args, tuple):
            record.args = tuple(shown_target(a) if isinstance(a, str) else a for a in record.args)
        return True


class TextFormatter(logging.Formatter):
    """The plain text line: time, level, logger, `[agent=… task=… gen=…]` when the line is about a task, message."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        task_id = getattr(record, "task_id", None)
        record.task = "" if task_id is None else (
            f" [agent={getattr(record, 'agent', '')} task={task_id} gen={getattr(record, 'claim_generation', None)}]"
        )
        return super().format(record)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: timestamp, level, logger, message, the task fields when set, and any exception."""

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.fromtimestamp(record.created, UTC)
        line: dict[str, Any] = {
            "timestamp": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in TASK_FIELDS:
            if hasattr(record, name):
                line[name] = getattr(record, name)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str)


warning_log = logging.getLogger("py.warnings")


def log_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: str | None = None
) -> None:
    """`warnings.showwarning` as one log line: the warning's category, text and where it was raised."""
    warning_log.warning("%s: %s (%s:%s)", category.__name__, message, filename, lineno)


def configure_logging(level: str, as_json: bool) -> None:
    """The root handler on stderr: JSON lines or the plain text format, with the task fields on either; Python's
    warnings (a library's `InsecureKeyLengthWarning`) go through it too, one line each (`log_warning`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(TaskFields())
    handler.addFilter(AccessTargets())
    handler.setFormatter(JsonFormatter() if as_json else TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    warnings.showwarning = log_warning


def register(serve: argparse.ArgumentParser) -> None:
    """Add `--log-json` and `--trace` to `serve`."""
    serve.add_argument("--log-json", action="store_true", help="log one JSON object a line, with the task each is about")
    serve.add_argument(
        TRACE_FLAG, action="store_true",
        help="OpenTelemetry traces of the SDK's request handling: to OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set, "
        "else one JSON span a line on stdout (needs pip install 'a2a-bridge[tracing]')",
    )


ACCESS_LEVELS = ("info", "debug", "trace")
"""The `--log-level` values that show uvicorn's access lines."""


def uvicorn_logging(args: argparse.Namespace) -> dict[str, Any]:
    """No logging config of uvicorn's own: its lines (`uvicorn.error`, `uvicorn.access`) reach the root handler, in the
    bridge's format, plain or JSON; its access log only at a level that shows it (uvicorn writes access lines at info,
    and formats each line's client and path before the logger drops it)."""
    return {"log_config": None, "access_log": args.log_level in ACCESS_LEVELS}


def sdk_tracing_from_argv(argv: Sequence[str]) -> None:
    """Before the SDK is imported: its tracing on for `serve --trace`, off otherwise unless the environment says."""
    if argv[1:2] == ["serve"] and TRACE_FLAG in argv[2:]:
        os.environ[SDK_TRACING] = "true"
    else:
        os.environ.setdefault(SDK_TRACING, "false")


def start_tracing() -> None:
    """Install an OpenTelemetry tracer provider: OTLP/HTTP when an OTLP endpoint is set, else JSON spans on stdout."""
    tracing = logging.getLogger("a2a_bridge.tracing")
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError:
        tracing.warning("--trace: opentelemetry-sdk is not installed (pip install 'a2a-bridge[tracing]'); no spans are exported")
        return
    provider = TracerProvider(resource=Resource.create({"service.name": "a2a-bridge"}))
    if any(os.environ.get(name) for name in OTLP_ENDPOINTS):
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            tracing.warning("--trace: opentelemetry-exporter-otlp-proto-http is not installed (pip install 'a2a-bridge[tracing]')")
            return
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        tracing.info("tracing on: spans exported over OTLP/HTTP")
    else:
        exporter = ConsoleSpanExporter(out=sys.stdout, formatter=lambda span: span.to_json(indent=None) + "\n")
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracing.info("tracing on: spans written to stdout, one JSON object a line")
    trace.set_tracer_provider(provider)


def setup(args: argparse.Namespace) -> None:
    """Logging for every command; for `serve`, JSON lines under --log-json and tracing under --trace."""
    configure_logging(args.log_level, getattr(args, "log_json", False))
    if getattr(args, "trace", False):
        start_tracing()
