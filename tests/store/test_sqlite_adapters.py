"""The sqlite3 adapters for None and bool (`sqlite_adapters`): found at once, storing what sqlite3 stores without them."""

import sqlite3
from pathlib import Path

import pytest

from a2a_bridge.store import sqlite_adapters
from a2a_bridge.store.stores import StoreConfig, Stores

KEYS = [(type(None), sqlite3.PrepareProtocol), (bool, sqlite3.PrepareProtocol)]


def stored(db: sqlite3.Connection) -> list[tuple[object, ...]]:
    """A row of None, True, False, an int and a text bound by executemany and by execute, read back with its types."""
    db.execute("CREATE TABLE t (a, b, c, d, e)")
    db.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", [(None, True, False, 1, "x")])
    db.execute("INSERT INTO t VALUES (?, ?, ?, ?, ?)", (True, None, False, 2, None))
    return db.execute("SELECT a, typeof(a), b, typeof(b), c, typeof(c), d, e, typeof(e) FROM t").fetchall()


def test_none_and_bool_are_stored_as_sqlite3_stores_them_without_the_adapters(monkeypatch: pytest.MonkeyPatch) -> None:
    sqlite_adapters.install()
    adapted = stored(sqlite3.connect(":memory:"))
    for key in KEYS:
        monkeypatch.delitem(sqlite3.adapters, key)
    plain = stored(sqlite3.connect(":memory:"))
    assert adapted == plain == [
        (None, "null", 1, "integer", 0, "integer", 1, "x", "text"),
        (1, "integer", None, "null", 0, "integer", 2, None, "null"),
    ]


def test_a_store_on_sqlite_installs_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in KEYS:
        monkeypatch.delitem(sqlite3.adapters, key, raising=False)
    Stores(StoreConfig.parse(f"sqlite:///{tmp_path / 'adapters.db'}"))
    assert [sqlite3.adapters.get(key) for key in KEYS] == [sqlite_adapters._NOTHING.get, int]
