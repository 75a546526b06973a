"""`a2a-bridge capture [--check]`: record every scenario against our own server: a transcript `NN-name.http` per
scenario, and the other files the kit has (17-signed-card.txt, 19-planner.log).

Run from a checkout, it records into capture/out; installed from a wheel, into `capture-out/` in the current
directory (the transcripts shipped in the package stay as they were shipped). The capture is deterministic (seeded
ids, a stepping clock, agents paced by the driver), so `--check` records again into a temporary folder and compares
the files byte for byte with the recorded ones: capture/out in a checkout, the shipped copy once installed.
"""

import argparse
import asyncio
import logging
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from a2a_bridge.capture.driver import capture_server
from a2a_bridge.capture.scenarios import SCENARIOS, record
from a2a_bridge.core.arg_types import folder

OUT = Path(__file__).resolve().parent / "out"
"""The recorded transcripts: capture/out in a checkout, the copy shipped in the package once installed."""
INSTALLED_OUT = Path("capture-out")
"""Where `capture` writes when not run from a checkout: in the current directory, never into the installed package."""
OUTPUTS = ("*.http", "*.txt", "*.log")
"""The kinds of file a capture writes, and --check compares."""


async def capture_into(folder: Path, started: Callable[[str], None] = lambda name: None) -> list[Path]:
    """Record every scenario and write its files; returns the files written."""
    async with capture_server() as cap:
        files = await record(cap, started)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def outputs(folder: Path) -> set[str]:
    return {path.name for pattern in OUTPUTS for path in folder.glob(pattern)}


def differing(expected: Path, actual: Path) -> list[str]:
    """The names of output files that differ between two folders, or are in only one."""
    names = sorted(outputs(expected) | outputs(actual))
    return [
        name for name in names
        if not (expected / name).is_file() or not (actual / name).is_file()
        or (expected / name).read_bytes() != (actual / name).read_bytes()
    ]


def in_checkout() -> bool:
    """Whether the package runs from a source checkout (an editable install), where capture/out is the project's."""
    return (OUT.parents[1] / "pyproject.toml").is_file()


def default_out() -> Path:
    """Where `capture` writes without --out: capture/out in a checkout, else ./capture-out."""
    return OUT if in_checkout() else INSTALLED_OUT


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add `capture` to the a2a-bridge command."""
    command = commands.add_parser("capture", help="record every scenario against our own server as .http transcripts")
    command.add_argument("--check", action="store_true", help="capture again into a temporary folder and compare")
    command.add_argument(
        "--out", type=folder,
        help="where to write the transcripts (default capture/out in a checkout, else ./capture-out); with --check,"
        " the transcripts to compare with (default the recorded ones: capture/out, or the copy the package ships)",
    )
    command.set_defaults(run=main, log_level="warning")


def run_with_progress(folder: Path, console: Console) -> list[Path]:
    """Capture into `folder` with a progress bar that names the scenario being recorded."""
    with Progress(
        TextColumn("[bold]capture"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
        TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task("", total=len(SCENARIOS))

        def started(name: str) -> None:
            progress.update(task, description=name, completed=[n for n, _ in SCENARIOS].index(name))

        written = asyncio.run(capture_into(folder, started))
        progress.update(task, completed=len(SCENARIOS))
    return written


def main(args: argparse.Namespace) -> int:
    """0 when written (or, with --check, identical); 1 when --check finds a difference."""
    for name in ("a2a", "a2a_bridge"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="The HMAC key is")
    console = Console(highlight=False)
    if not args.check:
        for path in run_with_progress(args.out or default_out(), console):
            console.print(f"wrote {path}")
        return 0
    recorded = args.out or OUT
    with tempfile.TemporaryDirectory(prefix="a2a-capture-") as temporary:
        run_with_progress(Path(temporary), console)
        changed = differing(recorded, Path(temporary))
    if changed:
        errors = Console(stderr=True, highlight=False)
        errors.print(f"[bold red]capture differs from {recorded}:[/] " + ", ".join(changed))
        errors.print("run `a2a-bridge capture` to record again, and review the difference")
        return 1
    console.print(f"[green]capture matches {recorded} byte for byte[/] ({len(outputs(recorded))} files)")
    return 0
