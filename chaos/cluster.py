"""The processes under test: a throwaway PostgreSQL cluster and the a2a-bridge replicas that share it, each
startable, killable, pausable and restartable by the nemesis, all stopped on exit."""

import asyncio
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

HOST = "127.0.0.1"
START_TIMEOUT = 60.0
"""Seconds a replica or PostgreSQL may take to start (recovery after a crash included)."""
OPERATOR_TOKEN = "chaos-operator-token"
PG_GLOB = "/usr/lib/postgresql/*/bin"
FAKETIME_GLOBS = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


class ClusterError(RuntimeError):
    """A process under test could not be started or stopped."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def pg_bin() -> Path | None:
    """The newest PostgreSQL server binaries installed (Debian's layout), or None."""
    found = sorted(glob.glob(PG_GLOB), key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parent.name.split(".")])
    usable = [Path(p) for p in found if (Path(p) / "initdb").exists() and (Path(p) / "pg_ctl").exists()]
    return usable[-1] if usable else None


def faketime_library() -> Path | None:
    """libfaketime's preload library (Debian's `faketime` package), or None."""
    for pattern in FAKETIME_GLOBS:
        for path in sorted(glob.glob(pattern)):
            return Path(path)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        listed = subprocess.run(["dpkg", "-L", "libfaketime"], capture_output=True, text=True, timeout=10).stdout
        for line in listed.splitlines():
            if line.endswith("/libfaketime.so.1"):
                return Path(line)
    return None


@dataclass
class Postgres:
    """A PostgreSQL cluster of its own in `root` on a free loopback port, run as the `postgres` user when root."""

    root: Path
    bin: Path
    port: int = field(default_factory=free_port)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{HOST}:{self.port}/postgres"

    def _as_owner(self) -> list[str]:
        return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str, timeout: float = START_TIMEOUT) -> None:
        command = [*self._as_owner(), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise ClusterError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def _pg_ctl(self, *args: str) -> None:
        options = (
            f"-c listen_addresses={HOST} -p {self.port} -c unix_socket_directories={self.root} "
            "-c fsync=off -c max_connections=200"
        )
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "postgres.log"), "-w",
                  "-t", str(int(START_TIMEOUT)), "-o", options, *args)

    def init(self) -> None:
        self.root.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")

    def start(self) -> None:
        self._pg_ctl("start")

    def restart(self, mode: str) -> None:
        """pg_ctl restart -m fast|immediate: every connection of every replica is cut."""
        self._pg_ctl("restart", "-m", mode)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-m", "immediate", "stop")


@dataclass
class Replica:
    """One `a2a-bridge serve` process on a fixed port; `skew` seconds of wall clock under libfaketime (0: none)."""

    index: int
    store: str
    workdir: Path
    ledger: Path
    lease: float
    pace: float
    skew: int = 0
    faketime: Path | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def name(self) -> str:
        return f"r{self.index}"

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / f"replica-{self.index}.log"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "a2a_bridge", "serve", "--host", HOST, "--port", str(self.port),
            "--store", self.store, "--lease", str(self.lease), "--pace", str(self.pace),
            "--deploy-ledger", str(self.ledger), "--operator-token", OPERATOR_TOKEN, "--log-level", "warning",
        ]

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.skew and self.faketime is not None:
            env.update({
                "LD_PRELOAD": str(self.faketime),
                "FAKETIME": f"{self.skew:+d}s",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                "FAKETIME_DONT_RESET": "1",
            })
        return env

    async def start(self) -> None:
        """Start the process and return once it answers /readyz (its session taken, recovery done)."""
        self.starts += 1
        with self.log.open("ab") as log:
            log.write(f"--- start {self.starts} (skew {self.skew:+d} s) ---\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.environment(),
                start_new_session=True,
            )
        await self.wait_ready(START_TIMEOUT)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def wait_ready(self, timeout: float) -> None:
        """Poll /readyz until it answers 200; ClusterError when the process exits or the time is up."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2) as client:
            while True:
                if not self.alive():
                    code = self.proc.returncode if self.proc else None
                    raise ClusterError(f"replica {self.name} exited with {code}; see {self.log}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{self.base}/readyz")).status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise ClusterError(f"replica {self.name} not ready within {timeout:.0f} s; see {self.log}")
                await asyncio.sleep(0.2)

    def signal(self, number: signal.Signals) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(number)

    def kill(self) -> None:
        """SIGKILL, and wait for the process to be gone."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.kill()
            self.proc.wait(timeout=30)

    def terminate(self) -> None:
        """SIGCONT and SIGTERM: the process drains and exits."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()

    def stop(self) -> None:
        """SIGTERM (after SIGCONT), then SIGKILL when it does not end in time."""
        self.terminate()
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_summary(self) -> str:
        """How much the replica logged, and how many tracebacks."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return f"{self.name}: no log"
        return f"{self.name}: {text.count(chr(10))} lines, {text.count('Traceback (most recent call last)')} tracebacks"


@dataclass
class Cluster:
    """PostgreSQL and the replicas, in one work directory."""

    workdir: Path
    postgres: Postgres
    replicas: list[Replica]

    @property
    def ledger(self) -> Path:
        return self.workdir / "deploys.jsonl"


def skews(count: int, skew: int) -> list[int]:
    """Replica 1 on time, replica 2 at +skew, replica 3 at -skew, the rest on time."""
    pattern = [0, skew, -skew]
    return [pattern[i] if i < len(pattern) else 0 for i in range(count)]


@contextlib.asynccontextmanager
async def cluster(workdir: Path, count: int, lease: float, pace: float, skew: int) -> AsyncIterator[Cluster]:
    """Start PostgreSQL (in a temporary directory the postgres user can reach, removed afterwards; its log is copied
    to `workdir`) and `count` replicas logging to `workdir`; stop every one of them on leaving, whatever happened."""
    binaries = pg_bin()
    if binaries is None:
        raise ClusterError(f"no PostgreSQL server binaries in {PG_GLOB} (apt-get install postgresql)")
    library = faketime_library() if skew else None
    if skew and library is None:
        raise ClusterError("no libfaketime (apt-get install faketime), needed for --skew; --skew 0 runs without")
    workdir.mkdir(parents=True, exist_ok=True)
    pg_root = Path(tempfile.mkdtemp(prefix="a2a-chaos-pg-"))
    pg_root.chmod(0o755)
    postgres = Postgres(pg_root / "pg", binaries)
    ledger = workdir / "deploys.jsonl"
    replicas = [
        Replica(i + 1, postgres.url, workdir, ledger, lease, pace, offset, library)
        for i, offset in enumerate(skews(count, skew))
    ]
    try:
        await asyncio.to_thread(postgres.init)
        await asyncio.to_thread(postgres.start)
        for replica in replicas:
            await replica.start()
        yield Cluster(workdir, postgres, replicas)
    finally:
        for replica in replicas:
            with contextlib.suppress(Exception):
                replica.terminate()
        for replica in replicas:
            with contextlib.suppress(Exception):
                replica.stop()
        with contextlib.suppress(Exception):
            postgres.stop()
        with contextlib.suppress(OSError):
            shutil.copyfile(postgres.root / "postgres.log", workdir / "postgres.log")
        shutil.rmtree(pg_root, ignore_errors=True)
