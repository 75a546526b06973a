"""The command line's value checks and help: argparse `type=` functions for ports, durations, counts and files to
write, so that a bad value is one argparse error line (exit 2), and the parser class whose help shows defaults."""

import argparse
import math
import os
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
"""The levels uvicorn and the logging module both know (`trace` is uvicorn's, below debug)."""


def _whole_number(text: str, lowest: int, highest: float, expected: str) -> int:
    """A whole number from `lowest` to `highest`, else refused as `expected {expected}, got …`."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not lowest <= number <= highest:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {number}")
    return number


def port(text: str) -> int:
    """A TCP port, 0 (any free port) to 65535."""
    return _whole_number(text, 0, 65535, "a port number from 0 to 65535")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """A number of seconds greater than 0."""
    value = _seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def seconds_or_zero(text: str) -> float:
    """A number of seconds, 0 or more."""
    value = _seconds(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or a positive number of seconds, got {text}")
    return value


def positive_count(text: str) -> int:
    """A whole number from 1."""
    return _whole_number(text, 1, math.inf, "a whole number from 1")


def writable_file(text: str) -> Path:
    """A file the command may create or replace: its folder exists and may be written, and it is no folder itself."""
    path = Path(text)
    folder = path.parent
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"cannot write {text}: permission denied")
    return path


def folder(text: str) -> Path:
    """A folder the command writes into, made if missing: not a file."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    return path


def http_url(text: str) -> str:
    """An http:// or https:// URL with a host and, if it names one, a port from 1 to 65535."""
    try:
        parts = urlsplit(text)
        named_port = parts.port
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL with a valid host and port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or named_port == 0:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL with a host, got {text!r}")
    return text


class DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Help that names each option's default, where it has one worth naming (not None, False or empty)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default: Any = action.default
        if default is None or default is False or default == [] or default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


class CommandParser(argparse.ArgumentParser):
    """The parser of `a2a-bridge` and each of its commands: help shows defaults, and a bad argument is one line on
    stderr (the usage is one `--help` away) and exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelp)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
