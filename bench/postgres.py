"""The PostgreSQL part of `make bench` (`--only postgres`, issue 35): blocking SendMessage and GetTask on a2a-bridge
with a PostgreSQL store, one replica and two replicas on one database (the load split across both), beside the
bridge on SQLite and @a2a-js/sdk in memory in the same interleaved rounds, with the CPU the server(s) and the database
used per request.

PostgreSQL is the server A2A_BRIDGE_PG_URL names, else one this section starts with `.ci/postgres` on a free port
(where Debian's package is installed) and stops at the end; each run is on a fresh database created and dropped for
it. The database's CPU is read from /proc before and after each timed run: the backends of the run's database
(pg_stat_activity), and every process of the PostgreSQL server (the postmaster, its children and the children it
reaped), which counts other users of a shared server too."""

import asyncio
import contextlib
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import asyncpg

from bench import run
from bench.replicas import drop_database, fresh_database
from bench.status_poll import CLOCK_TICKS, Load, Run

POSTGRES_BEGIN, POSTGRES_END = "<!-- bench:postgres:begin -->", "<!-- bench:postgres:end -->"
SERVERS = ("js", "bridge-sqlite", "pg-1", "pg-2")
"""The servers of each round, in the order of the first (rotated from round to round)."""
REPLICAS = {"pg-1": 1, "pg-2": 2}
PG_BAR = 0.5
"""Issue 35: SendMessage on one PostgreSQL replica at this share of @a2a-js/sdk's rate, in the lowest round."""
SQLITE_BAR = 0.8
"""Issue 35: SendMessage on SQLite at this share of @a2a-js/sdk's rate, in the lowest round."""
GET_BAR = 1.0
"""Issue 18: GetTask on SQLite at least @a2a-js/sdk's rate (here in the lowest round)."""
PG_ROOT = Path("/usr/lib/postgresql")
START_SECONDS = 120


@dataclass
class Reading:
    """CPU seconds used so far: by the servers, by each backend of the run's database, by all of PostgreSQL."""

    server: float = 0.0
    backends: dict[int, float] = field(default_factory=dict)
    postgres: float = 0.0
    sessions: int = 0
    """Sessions (connections) the run's database has had, from pg_stat_database (its counts lag by up to a
    second)."""


@dataclass
class Measured:
    """One timed run with the CPU seconds the servers and the database used during it."""

    run: Run
    server: float = 0.0
    database: float | None = None
    """The run's database's backends (None: no PostgreSQL, or not on this machine)."""
    postgres: float | None = None
    """Every process of the PostgreSQL server."""
    sessions: int | None = None
    """Connections opened to the run's database during the run (each a new PostgreSQL backend process)."""

    def per_request(self, seconds: float | None) -> float | None:
        """Milliseconds of CPU per answered request."""
        if seconds is None or not self.run.completed:
            return None
        return seconds / self.run.completed * 1000


@dataclass
class PostgresStats:
    send: dict[str, list[Measured]] = field(default_factory=dict)
    get: dict[str, list[Measured]] = field(default_factory=dict)
    shared: bool = True
    """Whether PostgreSQL was A2A_BRIDGE_PG_URL's server (which others may use) rather than one started here."""


def proc_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None where the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_cpu(pid: int, reaped: bool = False) -> float:
    """User plus system CPU seconds of a process (with its reaped children's if `reaped`); 0 where it is gone."""
    fields = proc_fields(pid)
    if fields is None:
        return 0.0
    used = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if reaped else 0)
    return used / CLOCK_TICKS


def children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := proc_fields(int(entry.name))) is not None and int(fields[1]) == parent:
            found.append(int(entry.name))
    return found


def postgres_cpu(postmaster: int) -> float:
    """CPU seconds of the whole PostgreSQL server: the postmaster, its live children, and those it has reaped."""
    return process_cpu(postmaster, reaped=True) + sum(process_cpu(pid) for pid in children(postmaster))


@dataclass
class Watch:
    """Where a run's CPU is read: the server processes, and for PostgreSQL a monitoring connection to the run's
    database (its own backend left out) and the postmaster."""

    servers: list[int]
    monitor: asyncpg.Connection | None = None
    postmaster: int | None = None

    async def reading(self) -> Reading:
        reading = Reading(server=sum(process_cpu(pid) for pid in self.servers))
        if self.monitor is not None and self.postmaster is not None:
            rows = await self.monitor.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                            "AND pid <> pg_backend_pid()")
            reading.backends = {row["pid"]: process_cpu(row["pid"]) for row in rows}
            reading.postgres = postgres_cpu(self.postmaster)
            reading.sessions = int(await self.monitor.fetchval(
                "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"))
        return reading

    def measured(self, result: Run, before: Reading, after: Reading) -> Measured:
        measured = Measured(result, server=after.server - before.server)
        if self.monitor is not None and self.postmaster is not None:
            measured.database = sum(used - before.backends.get(pid, 0.0) for pid, used in after.backends.items())
            measured.postgres = after.postgres - before.postgres
            measured.sessions = after.sessions - before.sessions
        return measured


async def postmaster_of(monitor: asyncpg.Connection) -> int | None:
    """The postmaster's pid: the parent of the monitoring connection's backend (None where PostgreSQL runs elsewhere)."""
    fields = proc_fields(int(await monitor.fetchval("SELECT pg_backend_pid()")))
    return None if fields is None else int(fields[1])


def merged(runs: list[Run]) -> Run:
    """Concurrent runs against several replicas as one: counts added, the longest elapsed, each latency percentile
    the highest of the runs', CPU shares added."""
    whole = Run(runs[0].name, completed=sum(r.completed for r in runs), unexpected=sum(r.unexpected for r in runs),
                elapsed=max(r.elapsed for r in runs), latencies=[latency for r in runs for latency in r.latencies])
    whole.quantiles = {q: max(r.percentile(q) for r in runs) for q in runs[0].quantiles}
    for side in ("server_cpu", "server_wait", "client_cpu", "client_wait"):
        setattr(whole, side, sum(getattr(r, side) for r in runs))
    return whole


async def timed(name: str, group: list["run.Started"], requests: list[bytes], load: Load, needle: bytes,
                watch: Watch | None) -> Measured:
    """One timed run, the connections split evenly across the group's servers; with its CPU readings."""
    share = replace(load, connections=max(1, load.connections // len(group)))
    before = await watch.reading() if watch else Reading()
    runs = await asyncio.gather(*(run.load_run(name, started, request, 200, share, needle)
                                  for started, request in zip(group, requests)))
    after = await watch.reading() if watch else Reading()
    result = merged(list(runs))
    return watch.measured(result, before, after) if watch else Measured(result)


async def steady(measure: Callable[[], Awaitable[Measured]]) -> Measured:
    """bench/run.py's `steady` with the CPU readings: run again once when contended, the calmer kept."""
    first = await measure()
    if run.waited(first.run) <= run.CONTENDED:
        return first
    return min(first, await measure(), key=lambda measured: run.waited(measured.run))


def sends(group: list["run.Started"]) -> list[bytes]:
    """A SendMessage request for each server of the group, with a tag of its own: each run sends messages not sent
    before (the bridge answers a messageId it has seen as a retry, replaying the first send's answer)."""
    return [run.send_request(started) for started in group]


async def measure_group(group: list["run.Started"], plan: "run.Plan", watch: Watch, stats: PostgresStats,
                        key: str) -> None:
    """SendMessage, then GetTask of one finished task (on every server of the group), each after its warm-up."""
    load = Load(plan.connections, run.MAX_REQUESTS, plan.seconds)
    warmup = replace(load, seconds=plan.warmup)
    for started in group:
        run.checked_send(started)
    await timed("warmup", group, sends(group), warmup, b"", None)
    send = await steady(lambda: timed("SendMessage", group, sends(group), load, group[0].server.needle, watch))
    task_id = run.checked_send(group[0])["result"]["task"]["id"]
    gets = [run.rpc_request(started, "GetTask", {"id": task_id}) for started in group]
    await timed("warmup", group, gets, warmup, b"", None)
    get = await steady(lambda: timed("GetTask", group, gets, load, run.COMPLETED, watch))
    stats.send.setdefault(key, []).append(send)
    stats.get.setdefault(key, []).append(get)
    run.progress(f"  {group[0].server.label}: SendMessage {run.summary(send.run)}{costs(send)}; "
                 f"GetTask {run.summary(get.run)}{costs(get)}")


def costs(measured: Measured) -> str:
    database = measured.per_request(measured.database)
    return "" if database is None else (f", server {measured.per_request(measured.server):.2f} ms CPU/request, "
                                        f"database {database:.2f} ms CPU/request (all of PostgreSQL "
                                        f"{measured.per_request(measured.postgres):.2f}), {measured.sessions} "
                                        "connections opened")


def replica_server(bridge: "run.Server", key: str, database: str, number: int) -> "run.Server":
    """The bridge's SQLite server entry made a replica on `database`."""

    def argv(port: int, _database: Path | None) -> list[str]:
        command = bridge.argv(port, None)
        command[command.index("--store") + 1] = database
        return command

    label = "a2a-bridge (PostgreSQL, one replica)" if REPLICAS[key] == 1 else "a2a-bridge (PostgreSQL, two replicas)"
    return replace(bridge, key=f"{key}-{number}", label=label, argv=argv, sqlite=False)


async def measure_postgres_group(key: str, bridge: "run.Server", pg: str, plan: "run.Plan", scratch: Path,
                                 stats: PostgresStats) -> None:
    """One or two replicas on a fresh database, measured, then the database dropped."""
    database = await fresh_database(pg)
    try:
        with contextlib.ExitStack() as stack:
            group = [stack.enter_context(run.running(replica_server(bridge, key, database, number), scratch))
                     for number in range(REPLICAS[key])]
            monitor = await asyncpg.connect(database)
            try:
                watch = Watch([started.pid for started in group], monitor, await postmaster_of(monitor))
                await measure_group(group, plan, watch, stats, key)
            finally:
                await monitor.close()
    finally:
        await drop_database(pg, database)


async def measure_postgres_section(plan: "run.Plan", listed: list["run.Server"], scratch: Path, pg: str,
                                   shared: bool) -> PostgresStats:
    stats = PostgresStats(shared=shared)
    by_key = {server.key: server for server in listed}
    keys = [key for key in SERVERS if key in by_key or key in REPLICAS]
    for number in range(plan.rounds):
        run.progress(f"postgres: round {number + 1}/{plan.rounds}")
        for key in keys[number % len(keys):] + keys[:number % len(keys)]:
            if key in REPLICAS:
                await measure_postgres_group(key, by_key["bridge-sqlite"], pg, plan, scratch, stats)
                continue
            with run.running(by_key[key], scratch) as started:
                await measure_group([started], plan, Watch([started.pid]), stats, key)
    return stats


@contextlib.contextmanager
def postgres_server() -> Iterator[tuple[str, bool] | None]:
    """(URL, shared) of A2A_BRIDGE_PG_URL's server; else of one started here by .ci/postgres on a free port and
    stopped on exit, where Debian's package is installed; else None."""
    url = os.environ.get(run.PG_URL)
    if url:
        yield url, True
        return
    bins = sorted(PG_ROOT.glob("*/bin"), key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0)
    if not bins:
        yield None
        return
    port = run.free_port()
    directory = Path(f"/tmp/a2a-bench-pg-{port}")
    environment = {**os.environ, "A2A_BRIDGE_PG_PORT": str(port), "A2A_BRIDGE_PG_DIR": str(directory)}
    run.progress(f"postgres: starting PostgreSQL on 127.0.0.1:{port} (.ci/postgres, data in {directory})")
    started = subprocess.run(["bash", str(run.ROOT / ".ci" / "postgres")], env=environment, capture_output=True,
                             text=True, timeout=START_SECONDS, check=False)
    if started.returncode != 0:
        raise RuntimeError(f".ci/postgres failed ({started.returncode}): {started.stderr[-2000:]}")
    try:
        yield started.stdout.strip(), False
    finally:
        owner = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        subprocess.run([*owner, str(bins[-1] / "pg_ctl"), "-D", str(directory / "data"), "-m", "fast", "-w", "stop"],
                       capture_output=True, timeout=START_SECONDS, check=False)
        subprocess.run(["rm", "-rf", str(directory)], check=False, timeout=START_SECONDS)


def round_ratios(stats: dict[str, list[Measured]], key: str) -> list[float]:
    """Each round's rate of `key` over @a2a-js/sdk's in the same round."""
    return [measured.run.rate / js.run.rate if js.run.rate else 0.0 for measured, js in zip(stats[key], stats["js"])]


def acceptance(stats: PostgresStats) -> list[tuple[str, bool | None]]:
    if "js" not in stats.send:
        return [("@a2a-js/sdk not measured (node or interop/js/node_modules missing): no ratio", False)]
    checks: list[tuple[str, bool | None]] = []
    for table, method, key, bar, issue in ((stats.send, "SendMessage", "pg-1", PG_BAR, "35"),
                                           (stats.send, "SendMessage", "bridge-sqlite", SQLITE_BAR, "35"),
                                           (stats.get, "GetTask", "bridge-sqlite", GET_BAR, "18"),
                                           (stats.send, "SendMessage", "pg-2", None, "35"),
                                           (stats.get, "GetTask", "pg-1", None, "35"),
                                           (stats.get, "GetTask", "pg-2", None, "35")):
        ratios = round_ratios(table, key)
        where = {"pg-1": "one PostgreSQL replica", "pg-2": "two PostgreSQL replicas on one database",
                 "bridge-sqlite": "SQLite"}[key]
        text = (f"{method} on {where} {min(ratios):.2f}× @a2a-js/sdk in the lowest round (rounds "
                f"{', '.join(f'{r:.2f}×' for r in ratios)}; issue {issue}: "
                f"{'no bar' if bar is None else f'bar ≥ {bar}×'})")
        checks.append((text, None if bar is None else min(ratios) >= bar))
    return checks


def milliseconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def table(stats: dict[str, list[Measured]], labels: dict[str, str], connections: int) -> list[str]:
    lines = [
        "| server | req/s | p99 ms | vs @a2a-js/sdk (lowest round) | req/s per round | server CPU (waited) "
        "| server CPU ms/request | its database's backends, CPU ms/request | all of PostgreSQL, CPU ms/request "
        f"| wall ms/request at {connections} connections | connections opened per 1,000 requests | unexpected |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in SERVERS:
        measured = stats.get(key)
        if not measured:
            continue
        runs = [m.run for m in measured]
        rate = run.median_rate(runs)
        versus = "—" if "js" not in stats else f"{min(round_ratios(stats, key)):.2f}×"
        server = statistics.median(m.per_request(m.server) or 0.0 for m in measured)
        database = [value for m in measured if (value := m.per_request(m.database)) is not None]
        everything = [value for m in measured if (value := m.per_request(m.postgres)) is not None]
        opened = [m.sessions / m.run.completed * 1000 for m in measured if m.sessions is not None and m.run.completed]
        lines.append(
            f"| {labels[key]} | {rate:,.0f} | {run.median_p99_ms(runs):.1f} | {versus} "
            f"| {', '.join(f'{r.rate:,.0f}' for r in runs)} | {run.cpu(runs, 'server')} | {server:.2f} "
            f"| {milliseconds(statistics.median(database) if database else None)} "
            f"| {milliseconds(statistics.median(everything) if everything else None)} "
            f"| {connections / rate * 1000 if rate else 0:.2f} "
            f"| {f'{statistics.median(opened):.0f}' if opened else '—'} | {sum(r.unexpected for r in runs)} |")
    return lines


def render_postgres(stats: PostgresStats | None, plan: "run.Plan", listed: list["run.Server"], command: str,
                    load: float) -> str:
    labels = {server.key: server.label for server in listed}
    labels |= {"pg-1": "a2a-bridge (PostgreSQL, one replica)",
               "pg-2": "a2a-bridge (PostgreSQL, two replicas on one database, load split)"}
    lines = [
        "## PostgreSQL (issue 35)",
        "",
        f"Measured with `{command}`: {run.cpu_model()}, {os.cpu_count()} cores, "
        f"{'servers on core 0, load client on core 1, PostgreSQL unpinned' if run.PINNED else 'unpinned'}; load "
        f"average {load:.2f} before the run; CPython {platform.python_version()} ({sys.executable}); load by "
        f"{run.load_client()}. Blocking SendMessage (the bench agent), then GetTask of one finished task, "
        f"{plan.connections} connections (split evenly across two replicas), {plan.rounds} interleaved rounds of "
        f"{plan.seconds:g} s after {plan.warmup:g} s of warm-up; medians, ratios against @a2a-js/sdk (in memory) in "
        "the same round. Each PostgreSQL run is on a fresh database; "
        + ("the PostgreSQL server is A2A_BRIDGE_PG_URL's, which other processes may use: the all-of-PostgreSQL "
           "column counts them too." if stats is None or stats.shared else
           "the PostgreSQL server was started for this run by `.ci/postgres` (fsync off) and used by nothing else.")
        + " CPU per request is the CPU seconds read from /proc before and after each run over the requests answered; "
        "wall per request is the connections over the rate (a request's mean time in the server); connections "
        "opened are pg_stat_database's `sessions` of the run's database (each a PostgreSQL backend forked).",
        "",
    ]
    if stats is None:
        return "\n".join([*lines, f"Not measured: {run.PG_URL} is not set and Debian's postgresql package is not "
                                  "installed."])
    lines += ["### SendMessage (blocking)", "", *table(stats.send, labels, plan.connections), "",
              "### GetTask (one finished task)", "", *table(stats.get, labels, plan.connections), "",
              "### Acceptance (issue 35, PostgreSQL)", "",
              *[f"- {'INFO' if passed is None else 'PASS' if passed else 'FAIL'}: {text}"
                for text, passed in acceptance(stats)]]
    return "\n".join(lines)
