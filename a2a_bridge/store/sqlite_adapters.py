"""The sqlite3 module's adapters for the values it binds as they are but first looks an adapter up for: None and bool.

CPython's sqlite3 binds an exact int, float, str or bytearray directly; any other value goes through its adapters,
and where none is registered for the value's type it looks `__adapt__` up on its `PrepareProtocol` type, a failed
lookup that formats an AttributeError message each time (about 2,500 instructions a value; a SendMessage on SQLite
binds a dozen None and bool values, a push config's outbox row more). Registered, an adapter is found in the
module's table at once: None is bound as None (`dict.get` of an empty dict, a call in C) and a bool as its int, what
sqlite3 binds for them without an adapter, so what is stored does not change. Process-wide, as every sqlite3 adapter."""

import sqlite3

_NOTHING: dict[object, object] = {}


def install() -> None:
    """Register the adapters (again: the same)."""
    sqlite3.register_adapter(type(None), _NOTHING.get)
    sqlite3.register_adapter(bool, int)
