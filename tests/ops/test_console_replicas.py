"""The console's overview on PostgreSQL with two replicas: each sees the other's session holding the claim of the turn it
runs, its own session as this process, the store as postgresql, and the same counts (read from the shared database)."""

import httpx

from tests.claim_support import FULL_SUITE, OPERATOR, start, wait_state
from tests.support import ServerProcess, user_message, wait_for


def test_the_overview_shows_the_replicas_sessions_and_their_claims(pg_database: str) -> None:
    a = ServerProcess(pg_database, pace=2.0, extra=["--agent", "test-runner"]).start()
    b = ServerProcess(pg_database, pace=2.0, extra=["--agent", "test-runner"]).start()
    try:
        task_id = start(a, "test-runner", user_message(FULL_SUITE, "replica-overview"))["id"]
        wait_state(a, "test-runner", task_id, "TASK_STATE_WORKING")
        session_a = httpx.get(f"{a.url}/readyz", timeout=10).json()["session"]
        session_b = httpx.get(f"{b.url}/readyz", timeout=10).json()["session"]

        def seen_from_b() -> dict | None:
            body = httpx.get(f"{b.url}/console/api/overview", headers=OPERATOR, timeout=10).json()
            rows = {row["session"]: row for row in body["sessions"]["sessions"]}
            return body if rows.get(session_a, {}).get("claims") == 1 else None

        body = wait_for(seen_from_b, timeout=20, what="replica a's claim seen from b")
        rows = {row["session"]: row for row in body["sessions"]["sessions"]}
        assert body["sessions"]["shared"] is True and body["sessions"]["this"] == session_b
        assert rows[session_a]["status"] == "live" and rows[session_a]["this"] is False
        assert rows[session_b] == {"session": session_b, "claims": 0, "this": True, "status": "this process"}
        assert body["store"] == {**body["store"], "kind": "postgresql", "ok": True}
        [agent] = body["agents"]
        assert agent["claims"] == {"claimed": 1} and agent["states"] == {"WORKING": 1}
    finally:
        a.stop()
        b.stop()
