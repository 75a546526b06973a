"""One log line per request the SDK refuses as the client's error, and no traceback: its JSON-RPC dispatcher logs a
refused envelope or unparsable params with `logger.exception` (a traceback of up to hundreds of lines) and then the
error it answers; its REST handler logs the parser's text, which can repeat the whole value it failed on. A request
answered "store unavailable" gets no line of its own: the outage is logged once (`store_faults.Outage`). A stream of
the HTTP+JSON binding that ends with an A2A error the bridge raised (an agent's failure, already logged with the
agent's traceback where it raised; "store unavailable") gets no second traceback from the SDK's REST dispatcher."""

import logging

from a2a.server.routes import jsonrpc_dispatcher, rest_dispatcher
from a2a.utils import error_handlers
from a2a.utils.errors import A2AError

from a2a_bridge.store.store_faults import MESSAGE as STORE_UNAVAILABLE

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


REST_STREAM_ERROR = "Error during REST SSE stream"
"""The SDK's REST dispatcher's `logger.exception` message for any exception that ends an event stream."""


class RaisedOnPurpose(logging.Filter):
    """Drops the REST dispatcher's traceback of a stream ended by an A2A error: the bridge raises those into the
    stream on purpose and logs their cause where it happens; any other exception keeps the SDK's traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (record.msg == REST_STREAM_ERROR and isinstance(error, A2AError))


FILTERS: dict[str, type[logging.Filter]] = {
    jsonrpc_dispatcher.__name__: RefusalLines,
    error_handlers.__name__: RefusalLines,
    rest_dispatcher.__name__: RaisedOnPurpose,
}
"""The filter each of the SDK's loggers gets."""


def install() -> None:
    """Put the filters on the SDK's dispatcher and REST loggers, once."""
    for name, kind in FILTERS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in logger.filters):
            logger.addFilter(kind())
