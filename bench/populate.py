"""Fill a2a-bridge's SQLite file quickly: copy the rows of one task the bridge itself stored, under fresh ids.

Used by `make bench` where serving every SendMessage would take longer than its bound. The copy is generic over
the file's tables (the SDK's task table and the bridge's ledger tables, whatever columns they have today): every
row that names the template task by `task_id` (or, for the SDK's table, by its text `id`) is copied, with the
template's task, context and message ids replaced wherever they appear in it; integer row ids are left to SQLite.
"""

import contextlib
import sqlite3
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BATCH = 5_000
ID_COLUMNS = ("context_id", "message_id")
"""Columns whose template values are replaced in each copy, besides the task id."""


@dataclass(frozen=True)
class TableCopy:
    """The template's rows of one table, and which of their columns name an id that each copy replaces."""

    name: str
    columns: list[str]
    rows: list[tuple[Any, ...]]
    rewritten: list[int]
    row_id: int | None


def key_column(info: list[tuple[Any, ...]]) -> str | None:
    """The column naming a row's task: `task_id`, else a text `id` (the SDK's task table)."""
    types = {row[1]: str(row[2]).upper() for row in info}
    if "task_id" in types:
        return "task_id"
    if "id" in types and "INT" not in types["id"]:
        return "id"
    return None


def template_rows(db: sqlite3.Connection, template: str) -> tuple[list[TableCopy], list[str]]:
    """Every table's rows naming `template`, and the ids a copy replaces (the task id first)."""
    copies: list[TableCopy] = []
    replaced = [template]
    tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").fetchall()
    for (table,) in tables:
        info = db.execute(f'PRAGMA table_info("{table}")').fetchall()
        key = key_column(info)
        if key is None:
            continue
        rows = db.execute(f'SELECT * FROM "{table}" WHERE "{key}" = ?', (template,)).fetchall()
        if not rows:
            continue
        columns = [row[1] for row in info]
        keys = [row for row in info if row[5]]
        row_id = columns.index(keys[0][1]) if len(keys) == 1 and str(keys[0][2]).upper() == "INTEGER" else None
        for column in ID_COLUMNS:
            if column in columns:
                replaced += [row[columns.index(column)] for row in rows if isinstance(row[columns.index(column)], str)]
        copies.append(TableCopy(table, columns, rows, [], row_id))
    replaced = list(dict.fromkeys(value for value in replaced if value))
    for copy in copies:
        copy.rewritten.extend(
            index for index in range(len(copy.columns))
            if any(mentions(row[index], old) for row in copy.rows for old in replaced)
        )
    return copies, replaced


def mentions(value: Any, old: str) -> bool:
    """Whether a column value (text or bytes; anything else never) holds `old`."""
    if isinstance(value, str):
        return old in value
    return isinstance(value, bytes) and old.encode() in value


def rewrite(value: Any, mapping: dict[str, str]) -> Any:
    for old, new in mapping.items():
        if isinstance(value, str):
            value = value.replace(old, new)
        elif isinstance(value, bytes):
            value = value.replace(old.encode(), new.encode())
    return value


def clone_tasks(database: Path, template: str, count: int) -> list[str]:
    """Store `count` copies of task `template` in the bridge's SQLite file; returns the new task ids."""
    created: list[str] = []
    with contextlib.closing(sqlite3.connect(database, timeout=30)) as db:
        copies, replaced = template_rows(db, template)
        if not copies:
            raise LookupError(f"no row of {database} names task {template}")
        while len(created) < count:
            batch: dict[str, list[tuple[Any, ...]]] = {copy.name: [] for copy in copies}
            for _ in range(min(BATCH, count - len(created))):
                mapping = {old: str(uuid.uuid4()) for old in replaced}
                created.append(mapping[template])
                for copy in copies:
                    for row in copy.rows:
                        values = list(row)
                        for index in copy.rewritten:
                            values[index] = rewrite(values[index], mapping)
                        if copy.row_id is not None:
                            values[copy.row_id] = None
                        batch[copy.name].append(tuple(values))
            with db:
                for copy in copies:
                    marks = ", ".join("?" * len(copy.columns))
                    names = ", ".join(f'"{column}"' for column in copy.columns)
                    db.executemany(f'INSERT INTO "{copy.name}" ({names}) VALUES ({marks})', batch[copy.name])
    return created
