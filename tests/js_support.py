"""Node interop support: where the JS SDK is installed, and the echo agent server of interop/js on loopback."""

import os
import queue
import shutil
import subprocess
import threading
from pathlib import Path
from types import TracebackType

import pytest

from tests.support import end_process

JS_DIR = Path(__file__).resolve().parents[1] / "interop" / "js"
JS_SDK = JS_DIR / "node_modules" / "@a2a-js" / "sdk"


def node() -> str:
    """The `node` executable with interop/js's packages installed; skips locally without them, fails under CI."""
    executable = shutil.which("node")
    if executable is not None and JS_SDK.is_dir():
        return executable
    missing = "node" if executable is None else f"{JS_SDK} (run: npm ci --prefix interop/js)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{missing} is missing; .ci/run installs it")
    pytest.skip(f"{missing} is missing")


class EchoServer:
    """`node interop/js/echo-server.mjs` on a free loopback port, for the life of a `with` block."""

    def __init__(self, executable: str, timeout: float = 30.0) -> None:
        self.executable = executable
        self.timeout = timeout
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> "EchoServer":
        self.proc = subprocess.Popen(
            [self.executable, "echo-server.mjs", "0"], cwd=JS_DIR, stdout=subprocess.PIPE, text=True
        )
        first: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        threading.Thread(target=lambda: first.put(stdout.readline()), daemon=True).start()
        try:
            line = first.get(timeout=self.timeout)
        except queue.Empty:
            self.__exit__(None, None, None)
            raise AssertionError("the echo server did not start") from None
        if not line.startswith("listening on "):
            self.__exit__(None, None, None)
            raise AssertionError(f"the echo server said {line!r}")
        self.url = line.removeprefix("listening on ").strip()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        end_process(self.proc)
        self.proc = None
