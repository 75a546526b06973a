"""`a2a-bridge capture [--check]`: record every scenario against our own server into capture/out/NN-name.http.

The capture is deterministic (seeded ids, a stepping clock, agents paced by the driver), so `--check` records again
into a temporary folder and compares the files byte for byte with the ones in capture/out.
"""

import argparse
import asyncio
import logging
import sys
import tempfile
import warnings
from pathlib import Path

from capture.driver import capture_server
from capture.scenarios import record
from capture.writer import render

OUT = Path(__file__).resolve().parent / "out"


async def capture_into(folder: Path) -> list[Path]:
    """Record every scenario and write one transcript per scenario; returns the files written."""
    async with capture_server() as cap:
        files = await record(cap)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (blocks, preamble) in files.items():
        path = folder / f"{name}.http"
        path.write_text(render(blocks, preamble), encoding="utf-8")
        written.append(path)
    return written


def differing(expected: Path, actual: Path) -> list[str]:
    """The names of transcripts that differ between two folders, or are in only one."""
    names = sorted({p.name for p in expected.glob("*.http")} | {p.name for p in actual.glob("*.http")})
    return [
        name for name in names
        if not (expected / name).is_file() or not (actual / name).is_file()
        or (expected / name).read_bytes() != (actual / name).read_bytes()
    ]


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add `capture` to the a2a-bridge command."""
    command = commands.add_parser("capture", help="record every scenario against our own server as .http transcripts")
    command.add_argument("--check", action="store_true", help="capture again into a temporary folder and compare")
    command.add_argument("--out", type=Path, default=OUT, help="where the transcripts are (default capture/out)")
    command.set_defaults(run=main, log_level="warning")


def main(args: argparse.Namespace) -> int:
    """0 when written (or, with --check, identical); 1 when --check finds a difference."""
    for name in ("a2a", "a2a_bridge"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="The HMAC key is")
    if not args.check:
        for path in asyncio.run(capture_into(args.out)):
            print(f"wrote {path}")
        return 0
    with tempfile.TemporaryDirectory(prefix="a2a-capture-") as temporary:
        asyncio.run(capture_into(Path(temporary)))
        changed = differing(args.out, Path(temporary))
    if changed:
        print("capture differs from " + str(args.out) + ": " + ", ".join(changed), file=sys.stderr)
        print("run `a2a-bridge capture` to record again, and review the difference", file=sys.stderr)
        return 1
    print(f"capture matches {args.out} byte for byte")
    return 0
