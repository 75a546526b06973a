"""A request's body read from ASGI's `receive` up to a size, and a `receive` that hands on what was read."""

from starlette.types import Message, Receive


class ClientGone(Exception):
    """The client disconnected before its body arrived whole."""


async def read_body(receive: Receive, limit: int) -> tuple[list[Message], bytes | None]:
    """The body's messages as they arrived, and the whole body; None for the body once what arrived passes `limit`
    (nothing more is read). Raises `ClientGone` when the client leaves first."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGone
        messages.append(message)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return messages, None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return messages, b"".join(chunks)


def body_message(body: bytes) -> Message:
    """The one message of a body read whole."""
    return {"type": "http.request", "body": body, "more_body": False}


def replayed(messages: list[Message], receive: Receive) -> Receive:
    """A receive that hands on `messages`, then what the server sends next (a disconnect)."""
    pending = list(reversed(messages))

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay
