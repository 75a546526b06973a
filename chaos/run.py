"""`python -m chaos.run` (`make chaos`): PostgreSQL and N replicas of their own, clients and the nemesis for
`--duration` seconds, a quiet period, then the checker; prints the counts and every violation, writes the history as
JSON, and exits 1 on any violation (2 when the run itself could not be made)."""

import argparse
import asyncio
import contextlib
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from chaos.checker import CHECKS, Report, check, settled, stored
from chaos.clients import run_clients
from chaos.cluster import Cluster, ClusterError, cluster
from chaos.history import History, now
from chaos.nemesis import KILL, KINDS, PAUSE, PG_FAST, PG_IMMEDIATE, Nemesis

DRAIN = 15.0
"""Seconds the clients have, once the faults stop, to finish the scenario each is in; then they are cancelled."""
QUIET_POLL = 1.0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m chaos.run", description=__doc__)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of faults and load (default: 120)")
    parser.add_argument("--replicas", type=int, default=3, help="replicas on the one database (default: 3)")
    parser.add_argument("--clients", type=int, default=10, help="concurrent clients (default: 10)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the clients and the nemesis (default: random)")
    parser.add_argument("--lease", type=float, default=3.0, help="the replicas' claim lease in seconds (default: 3)")
    parser.add_argument("--pace", type=float, default=0.5, help="seconds per step of the sample agents (default: 0.5)")
    parser.add_argument("--skew", type=int, default=30, help="replica 2 runs at +SKEW s, replica 3 at -SKEW s (0: no skew)")
    parser.add_argument("--quiet", type=float, default=90.0, help="longest quiet period in seconds (default: 90)")
    parser.add_argument("--no-pg-restart", action="store_true", help="never restart PostgreSQL")
    parser.add_argument("--no-kill", action="store_true", help="never SIGKILL a replica")
    parser.add_argument("--no-pause", action="store_true", help="never SIGSTOP a replica")
    parser.add_argument("--workdir", type=Path, default=None, help="where the database, logs and history go (default: a new temporary directory)")
    parser.add_argument("--history", type=Path, default=None, help="the history's JSON file (default: WORKDIR/history.json)")
    options = parser.parse_args(argv)
    if options.replicas < 1 or options.clients < 1 or options.duration < 0 or options.lease <= 0:
        parser.error("--replicas and --clients must be at least 1, --duration at least 0, --lease above 0")
    return options


def fault_kinds(options: argparse.Namespace) -> tuple[str, ...]:
    dropped = {
        KILL: options.no_kill, PAUSE: options.no_pause, PG_FAST: options.no_pg_restart, PG_IMMEDIATE: options.no_pg_restart,
    }
    return tuple(kind for kind in KINDS if not dropped[kind])


async def quiet(history: History, database: str, timeout: float) -> list[str]:
    """Wait until every acknowledged task is terminal or legitimately waiting, or `timeout`; the task ids unsettled."""
    deadline = now() + timeout
    wanted = set(history.task_agents())
    while True:
        with contextlib.suppress(OSError, ConnectionError):
            tasks, _ = await stored(database)
            unsettled = sorted(t for t in wanted if t not in tasks or not settled(tasks[t].record["state"], tasks[t]))
            if not unsettled or now() > deadline:
                return unsettled
        if now() > deadline:
            return sorted(wanted)
        await asyncio.sleep(QUIET_POLL)


def render(
    report: Report, faults: Counter[str], history: History, unsettled: list[str], seconds: float, logs: list[str]
) -> str:
    """The counts, then every violation with its evidence."""
    lines = [
        f"chaos: {seconds:.0f} s, {len(history.operations)} requests, {report.messages} messages sent, "
        f"{report.acknowledged} acknowledged, {report.tasks} tasks",
        "final states: " + (", ".join(f"{state} {n}" for state, n in sorted(report.final_states.items())) or "none"),
        "faults: " + (", ".join(f"{kind} {n}" for kind, n in sorted(faults.items())) or "none"),
        f"unsettled after the quiet period: {len(unsettled)}",
    ]
    lines.append("replica logs: " + "; ".join(logs))
    exits = [f for f in history.faults if f.kind == "exited"]
    if exits:
        lines.append("replicas that exited by themselves: " + ", ".join(f"{f.target} ({f.detail})" for f in exits))
    counted = report.by_check()
    lines.append("checks: " + "; ".join(f"{name}: {'ok' if not counted[name] else f'{counted[name]} VIOLATIONS'}" for name in CHECKS))
    for violation in report.violations:
        lines.append(f"VIOLATION [{violation.check}] task {violation.task_id}: {violation.evidence}")
    lines.append(f"{len(report.violations)} violations" if report.violations else "no violations")
    return "\n".join(lines)


async def drain(clients: asyncio.Task[None]) -> None:
    """Let the clients finish their scenarios for a while, then cancel what is left."""
    done, _ = await asyncio.wait({clients}, timeout=DRAIN)
    if not done:
        clients.cancel()
        await asyncio.wait({clients})
    elif clients.exception() is not None:
        raise clients.exception()  # type: ignore[misc]


async def session(options: argparse.Namespace, workdir: Path) -> int:
    seed = options.seed if options.seed is not None else random.randrange(1_000_000)
    print(f"chaos: seed {seed}, {options.replicas} replicas, {options.clients} clients, {options.duration:g} s of faults, "
          f"lease {options.lease:g} s, skew ±{options.skew} s; work directory {workdir}", flush=True)
    history = History()
    started = time.monotonic()
    async with cluster(workdir, options.replicas, options.lease, options.pace, options.skew) as running:
        report, unsettled, faults = await exercise(options, running, history, seed)
    logs = [replica.log_summary() for replica in running.replicas]
    output = render(report, faults, history, unsettled, time.monotonic() - started, logs)
    print(output, flush=True)
    target = options.history or workdir / "history.json"
    history.write(target, {
        "seed": seed, "options": {k: str(v) for k, v in vars(options).items()}, "unsettled": unsettled,
        "violations": [vars(v) for v in report.violations], "final_states": dict(report.final_states),
        "faults_injected": dict(faults),
    })
    print(f"history: {target}; replica logs: {workdir}/replica-*.log", flush=True)
    return 1 if report.violations else 0


async def exercise(
    options: argparse.Namespace, running: Cluster, history: History, seed: int
) -> tuple[Report, list[str], Counter[str]]:
    """Load and faults, the quiet period, the checks."""
    stop = asyncio.Event()
    nemesis = Nemesis(running, history, random.Random(seed), options.lease, fault_kinds(options))
    clients = asyncio.create_task(run_clients(options.clients, running.replicas, history, seed, stop, f"chaos{seed}"))
    try:
        await nemesis.run(options.duration)
        stop.set()
        await drain(clients)
    finally:
        clients.cancel()
    print(f"chaos: faults over ({dict(nemesis.counts)}); quiet period (at most {options.quiet:g} s)", flush=True)
    unsettled = await quiet(history, running.postgres.url, options.quiet)
    report = await check(history, running.replicas, running.postgres.url, running.ledger)
    return report, unsettled, nemesis.counts


async def main_async(options: argparse.Namespace) -> int:
    current = asyncio.current_task()
    assert current is not None
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(number, current.cancel)
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="a2a-chaos-"))
    return await session(options, workdir)


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    try:
        return asyncio.run(main_async(options))
    except ClusterError as failure:
        print(f"chaos: {failure}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("chaos: interrupted; every process stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
