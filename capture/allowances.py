"""Documented, deliberate differences the replayer reports apart from failures, read from a TOML file.

Each `[[allow]]` entry names a transcript (`file`, its stem or a glob, or `*`), a block (`block`, its number or label
such as `"webhook 3"`, or `*`), a JSON path (`path`: `*` stands for one key or index, `**` for any number of them;
a stream's events are `$[0]`, `$[1]`, …; `status` and `headers.NAME` name the status line and a header) and the
`reason` the difference is acceptable. An optional `kind` narrows the entry to one kind of difference (`unexpected
key`, `missing key`, `unexpected item`, `value`, `type`, …), so that, say, a printed default is allowed where a
changed value is not; an optional `live` list allows only those live values (`live = ["", [], {}]`).
"""

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2a_bridge.capture.compare import Difference, path_matches, path_segments


SHIPPED = Path(__file__).resolve().parent / "allow"
"""The allow files that come with the bridge (`bridge`, `rerun`), in the checkout and in the installed package."""


class AllowError(ValueError):
    """An allow file that cannot be read; the message names the file and the entry."""


@dataclass(frozen=True, eq=False)
class Allowed:
    """One documented difference."""

    file: str
    block: str
    path: str
    reason: str
    kind: str | None = None
    live: tuple[Any, ...] | None = None

    def covers(self, file: str, label: str, difference: Difference) -> bool:
        return (
            fnmatch.fnmatchcase(file, self.file)
            and (self.block == "*" or self.block == label)
            and (self.kind is None or self.kind == difference.kind)
            and (self.live is None or any(difference.live == value for value in self.live))
            and path_matches(self.path, difference.path)
        )

    def __str__(self) -> str:
        kind = f" ({self.kind})" if self.kind else ""
        return f"{self.file} #{self.block} {self.path}{kind}"


@dataclass(frozen=True)
class AllowList:
    """The entries of one or more allow files, in order."""

    entries: tuple[Allowed, ...] = ()

    def find(self, file: str, label: str, difference: Difference) -> Allowed | None:
        return next((entry for entry in self.entries if entry.covers(file, label, difference)), None)


def load(path: Path) -> AllowList:
    """Read an allow file; every entry needs file, block, path and a reason."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        shipped = ", ".join(sorted(file.stem for file in SHIPPED.glob("*.toml")))
        raise AllowError(f"{path}: no such file (the allow files shipped with the bridge: {shipped})") from error
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise AllowError(f"{path}: {error}") from error
    raw = data.get("allow", [])
    if not isinstance(raw, list):
        raise AllowError(f"{path}: `allow` must be an array of tables ([[allow]])")
    entries = []
    for number, entry in enumerate(raw, 1):
        where = f"{path}: entry {number}"
        if not isinstance(entry, dict):
            raise AllowError(f"{where}: not a table")
        missing = [key for key in ("file", "block", "path", "reason") if key not in entry]
        if missing:
            raise AllowError(f"{where}: missing {', '.join(missing)}")
        if not str(entry["reason"]).strip():
            raise AllowError(f"{where}: the reason is empty")
        try:
            path_segments(str(entry["path"]))
        except ValueError as error:
            raise AllowError(f"{where}: {error}") from error
        kind = str(entry["kind"]) if "kind" in entry else None
        live = entry.get("live")
        if live is not None and not isinstance(live, list):
            raise AllowError(f"{where}: `live` must be a list of values")
        entries.append(
            Allowed(
                str(entry["file"]), str(entry["block"]), str(entry["path"]), str(entry["reason"]).strip(), kind,
                tuple(live) if live is not None else None,
            )
        )
    return AllowList(tuple(entries))


def allow_file(argument: str) -> Path:
    """`--allow`: a path to an allow file, else the name of a shipped one (`bridge` or `bridge.toml`)."""
    given = Path(argument)
    shipped = SHIPPED / (argument if argument.endswith(".toml") else f"{argument}.toml")
    if given.is_file() or given.name != argument or not shipped.is_file():
        return given
    return shipped
