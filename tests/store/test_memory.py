"""Memory tracks what is stored (issue 14): a task grown by 60 follow-ups of about 1 MB raises the server's RSS (read
after every reply) by at most 4 times the bytes the task keeps, and once the task has ended and the server has forgotten it, RSS comes back
down to within half of those bytes of where it started.

The follow-ups ask for no history back (each is still loaded, folded and stored whole, twice), so the test times the
server rather than 60 replies of up to 54 MB; one GetTask then reads the whole task back through the same reply path."""

from pathlib import Path

import pytest

from tests.claim_support import DEPLOYER
from tests.support import ServerProcess, rpc, user_message, wait_for

FOLLOW_UPS = 60
PART = "y" * 225_000
PARTS = 4
KEPT = FOLLOW_UPS * PARTS * len(PART)
"""The bytes the follow-ups add to the task: 54 MB."""
GROWTH = 4 * KEPT
"""The most RSS may grow by while the task holds them."""
LEFT_OVER = KEPT // 2
"""The most RSS may stay above its start once the task has ended and is forgotten."""

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's RSS from /proc")


def rss(server: ServerProcess) -> int:
    """The server's resident set size in bytes."""
    assert server.proc is not None
    with open(f"/proc/{server.proc.pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def test_rss_tracks_a_task_of_60_one_megabyte_follow_ups_and_comes_back_down(tmp_path: Path) -> None:
    server = ServerProcess(
        f"sqlite:///{tmp_path / 'bridge.db'}", pace=0.01, extra=["--limit", f"max_task_bytes={2 * KEPT}"]
    ).start()
    try:
        url = server.agent("deployer")
        first = rpc(url, "SendMessage", {"message": user_message("Deploy something", "m0")}, headers=DEPLOYER)
        task = first["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        start = peak = rss(server)
        for n in range(FOLLOW_UPS):
            parts = [{"text": PART}] * PARTS
            message = {"messageId": f"f{n}", "role": "ROLE_USER", "taskId": task["id"], "parts": parts}
            params = {"message": message, "configuration": {"historyLength": 0}}
            reply = rpc(url, "SendMessage", params, headers=DEPLOYER)
            assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", n
            peak = max(peak, rss(server))
        whole = rpc(url, "GetTask", {"id": task["id"]}, headers=DEPLOYER)["result"]
        assert sum(len(part["text"]) for m in whole["history"] for part in m["parts"]) > KEPT * 0.8
        grown = max(peak, rss(server)) - start
        assert grown <= GROWTH, f"RSS grew by {grown / KEPT:.2f} times the {KEPT} bytes kept"

        canceled = rpc(url, "CancelTask", {"id": task["id"]}, headers=DEPLOYER)
        assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        back = f"RSS back within {LEFT_OVER} bytes of its start ({start})"
        wait_for(lambda: rss(server) - start <= LEFT_OVER, timeout=10, interval=0.1, what=back)
    finally:
        server.stop()
