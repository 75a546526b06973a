"""`make tck`: copies the TCK (../shared/a2a-tck, read-only) to `.tck/`, gives it its own virtualenv (kept while the
TCK's sources are unchanged), serves the conformance agent and its variants on 127.0.0.1 with an in-memory store,
runs the TCK against the agent on every binding its card lists, and once more against each variant for the
requirements only a variant can show (agents/conformance.py, VARIANTS). Prints the results per binding and level,
writes them to `.tck/summary.md`, and exits 1 on any MUST failure other than a listed TCK defect or any MUST skip."""

import argparse
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from a2a_bridge.agents.conformance import VARIANTS
from tck_run.defects import DEFECTS, TCK_COMMIT
from tck_run.report import Outcome, Verdict, judge, merged, outcomes, table, untested

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT.parent / "shared" / "a2a-tck"
WORK = ROOT / ".tck"
STREAMING_TIMEOUT = "1.0"
"""The TCK's `TCK_STREAMING_TIMEOUT` for the server and the TCK alike: half the default, the delayed cases run
faster and still leave the TCK time to subscribe."""
START_TIMEOUT = 30.0
TASKS_PER_MINUTE = 1_000_000
"""The server's `max_tasks_per_minute`: the TCK is one anonymous principal starting tasks as fast as it runs."""
STAMPED = ("PROVENANCE.md", "pyproject.toml", "uv.lock")
"""The TCK files whose content decides whether the copy and its virtualenv are reused."""


@dataclass(frozen=True)
class Run:
    """One TCK run: against which served agent, which tests (a pytest -k expression), which requirements it decides."""

    name: str
    agent: str
    select: str | None = None
    decides: frozenset[str] | None = None


RUNS = (
    Run("main", "conformance"),
    Run("extended-card", "conformance-extended-card", "CARD-EXT", frozenset({"CARD-EXT-001", "CARD-EXT-002"})),
    Run(
        "required-extension",
        "conformance-required-extension",
        "TestCapabilityExtensionRequired",
        frozenset({"CORE-CAP-004"}),
    ),
    Run(
        "minimal",
        "conformance-minimal",
        "TestCapabilityPushNotifications or TestCapabilityStreaming",
        frozenset({"CORE-CAP-001", "CORE-CAP-002"}),
    ),
)


def stamp(source: Path) -> str:
    digest = hashlib.sha256()
    for name in STAMPED:
        path = source / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b""))
    return digest.hexdigest()


def prepare(source: Path, work: Path) -> tuple[Path, Path]:
    """The writable copy of the TCK and its virtualenv's Python, made again only when the TCK changed."""
    copy, venv, stamp_file = work / "a2a-tck", work / "venv", work / "stamp"
    python = venv / "bin" / "python"
    wanted = stamp(source)
    if stamp_file.exists() and stamp_file.read_text() == wanted and python.exists():
        return copy, python
    shutil.rmtree(copy, ignore_errors=True)
    shutil.rmtree(venv, ignore_errors=True)
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("reports", ".venv", "__pycache__", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-e", str(copy)], check=True)
    stamp_file.write_text(wanted)
    return copy, python


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(log: Path) -> Iterator[str]:
    """`a2a-bridge serve` with the conformance agent and its variants; yields its base URL once every card answers."""
    port = free_port()
    command = [sys.executable, "-m", "a2a_bridge", "serve", "--store", "memory", "--port", str(port)]
    command += ["--grpc-port", "0"]
    command += ["--limit", f"max_tasks_per_minute={TASKS_PER_MINUTE}"]
    command += [arg for name in VARIANTS for arg in ("--agent", name)]
    env = {**os.environ, "TCK_STREAMING_TIMEOUT": STREAMING_TIMEOUT}
    base = f"http://127.0.0.1:{port}"
    with log.open("w") as out:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            pending = list(VARIANTS)
            while pending:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the server did not start; see {log}")
                try:
                    if httpx.get(f"{base}/{pending[0]}/.well-known/agent-card.json", timeout=2).status_code == 200:
                        pending.pop(0)
                        continue
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            yield base
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def run_tck(copy: Path, python: Path, base: str, run: Run, reports: Path) -> tuple[frozenset[str], list[Outcome]]:
    """One TCK run: the requirements it decides (all for the main run) and its outcomes; its reports are moved to
    `reports/{run.name}`."""
    command = [str(python), "run_tck.py", "--sut-host", f"{base}/{run.agent}", "--", "--webhook-host", "127.0.0.1"]
    command += ["-p", "no:cacheprovider"] + (["-k", run.select] if run.select else [])
    shutil.rmtree(copy / "reports", ignore_errors=True)
    target = reports / run.name
    shutil.rmtree(target, ignore_errors=True)
    env = {**os.environ, "TCK_STREAMING_TIMEOUT": STREAMING_TIMEOUT}
    with (reports / f"{run.name}.log").open("w") as out:
        subprocess.run(command, cwd=copy, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    shutil.move(copy / "reports", target)
    return run.decides or frozenset(), outcomes(target / "compatibility.json", run.name, run.decides)


def summary(results: list[Outcome], verdict: Verdict, reports: Path) -> str:
    not_tested = untested(reports / "main" / "compatibility.json")
    lines = [
        f"A2A TCK {TCK_COMMIT} against `a2a-bridge serve --agent conformance` and its variants "
        f"({len(RUNS)} runs; requirements per binding):",
        "",
        table(results),
        "",
        "Requirements the TCK has no test for: " + ", ".join(f"{level} {n}" for level, n in sorted(not_tested.items())),
        "",
    ]
    for title, items in (("MUST failures", verdict.failures), ("MUST skips", verdict.skips)):
        lines += [f"{title}: {len(items)}"] + [f"- {o.requirement} on {o.binding} ({o.run}): {o.errors}" for o in items]
    lines.append(f"MUST failures that are listed TCK defects: {len(verdict.defects)}")
    lines += [f"- {o.requirement} on {o.binding}" for o in verdict.defects]
    lines += ["", "Listed TCK defects:"] + [f"- {d.requirement}: {d.evidence}" for d in DEFECTS]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tck_run.run", description=__doc__)
    parser.add_argument("--source", type=Path, default=SOURCE, help="the TCK's checkout (read only)")
    parser.add_argument("--work", type=Path, default=WORK, help="where the copy, its virtualenv and reports go")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    copy, python = prepare(args.source, args.work)
    reports = args.work / "reports"
    reports.mkdir(exist_ok=True)
    with serving(reports / "server.log") as base:
        main_run, *variant_runs = [run_tck(copy, python, base, run, reports) for run in RUNS]
    results = merged(main_run[1], variant_runs)
    verdict = judge(results)
    text = summary(results, verdict, reports)
    (args.work / "summary.md").write_text(text + "\n")
    print(text)
    raise SystemExit(0 if verdict.passed else 1)


if __name__ == "__main__":
    main()
