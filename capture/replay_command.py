"""`a2a-bridge replay`: the command's options, and its run with the terminal reporter (`a2a_bridge.capture.console`)."""

import argparse
from pathlib import Path

from a2a_bridge.capture import allowances
from a2a_bridge.capture.allowances import AllowError
from a2a_bridge.capture.allowances import AllowList
from a2a_bridge.capture.console import RichReporter
from a2a_bridge.capture.replay import DEADLINE, UsageError, parse_maps, replay
from a2a_bridge.core.arg_types import positive_seconds, writable_file


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add `replay` to the a2a-bridge command."""
    command = commands.add_parser("replay", help="replay .http transcripts against live servers and compare")
    command.add_argument("files", nargs="+", type=Path, metavar="FILE.http", help="the transcripts to replay")
    command.add_argument(
        "--map", action="append", default=[], metavar="HOST:PORT=BASE_URL",
        help="send blocks whose Host is HOST:PORT to BASE_URL (repeat for each host)",
    )
    command.add_argument(
        "--allow", type=allowances.allow_file, action="append", default=[], metavar="FILE|NAME",
        help="TOML file of documented differences, or the name of one the bridge ships: bridge, rerun (repeatable)",
    )
    command.add_argument(
        "--junit", type=writable_file, metavar="FILE", help="write JUnit XML here (its folder must exist and be writable)"
    )
    command.add_argument(
        "--deadline", type=positive_seconds, default=DEADLINE, metavar="SECONDS",
        help="seconds to wait for events, progress and webhooks",
    )
    command.set_defaults(run=main, log_level="warning")


def main(args: argparse.Namespace) -> int:
    """Run `a2a-bridge replay`; 0 when every block passed, 1 on any failure, 2 on a usage error."""
    reporter = RichReporter()
    try:
        allowed = AllowList(tuple(entry for path in args.allow for entry in allowances.load(path).entries))
        results = replay(args.files, parse_maps(args.map), allowed, args.junit, reporter, args.deadline)
    except (UsageError, AllowError) as error:
        reporter.error(str(error))
        return 2
    return 0 if all(result.passed for result in results) else 1

