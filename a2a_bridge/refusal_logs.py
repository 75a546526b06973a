"""One log line per request the SDK refuses as the client's error, and no traceback: its JSON-RPC dispatcher logs a
refused envelope or unparsable params with `logger.exception` (a traceback of up to hundreds of lines) and then the
error it answers; its REST handler logs the parser's text, which can repeat the whole value it failed on. A request
answered "store unavailable" gets no line of its own: the outage is logged once (`store_faults.Outage`)."""

import logging

from a2a.server.routes import jsonrpc_dispatcher
from a2a.utils import error_handlers

from a2a_bridge.store_faults import MESSAGE as STORE_UNAVAILABLE

CLIENT_ERROR_TRACES = frozenset({"Failed to validate base JSON-RPC request", "Failed to parse request params"})
"""The dispatcher's `logger.exception` messages for a client's error; the line it logs next says what was answered."""
MAX_LINE = 500
"""Characters of a refusal's log message kept; longer ones are cut."""


class RefusalLines(logging.Filter):
    """Drops the dispatcher's tracebacks for a client's error and its lines for "store unavailable", and cuts long
    refusal lines to MAX_LINE characters."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in CLIENT_ERROR_TRACES:
            return False
        message = record.getMessage()
        if f"Message='{STORE_UNAVAILABLE}'" in message:
            return False
        if record.levelno < logging.ERROR and len(message) > MAX_LINE:
            record.msg, record.args = message[:MAX_LINE] + "…", None
        return True


def install() -> None:
    """Put the filter on the SDK's dispatcher and REST error loggers, once."""
    for name in (jsonrpc_dispatcher.__name__, error_handlers.__name__):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RefusalLines) for f in logger.filters):
            logger.addFilter(RefusalLines())
