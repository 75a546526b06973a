"""An operator's reason for an action (approve, cancel, reconcile): optional, kept in the claim's evidence; a reason
that is not text of at most 500 characters, or a body that is not a JSON object, is a 400 that changes nothing."""

from collections.abc import Iterator

import httpx
import pytest

from tests.claim_support import OPERATOR, claim_view, start_deploys, state_of
from tests.support import ServerProcess


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    process = ServerProcess("memory", pace=0.05).start()
    yield process
    process.stop()


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("approve", {"reason": 5}),
        ("approve", {"reason": "x" * 501}),
        ("approve", "not json"),
        ("approve", [1, 2]),
        ("cancel", {"reason": ["why"]}),
        ("reconcile", {"outcome": "completed", "evidence": {"note": "n"}, "reason": {"a": 1}}),
    ],
)
def test_a_bad_reason_is_refused_and_changes_nothing(server: ServerProcess, action: str, body: object) -> None:
    [deploy] = start_deploys(server, f"bad-reason-{action}", 1)
    path = {
        "approve": f"/deployer/approve/{deploy}",
        "cancel": f"/deployer/tasks/{deploy}/cancel",
        "reconcile": f"/deployer/tasks/{deploy}/reconcile",
    }[action]
    sent = {"content": body} if isinstance(body, str) else {"json": body}
    answer = httpx.post(f"{server.url}{path}", headers=OPERATOR, timeout=10, **sent)  # type: ignore[arg-type]
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert state_of(server, "deployer", deploy) == "TASK_STATE_AUTH_REQUIRED"
    assert [e["operation"] for e in claim_view(server, "deployer", deploy)["events"]] == ["create", "claim", "ask"]


def test_a_blank_reason_is_no_reason(server: ServerProcess) -> None:
    [deploy] = start_deploys(server, "blank-reason", 1)
    answer = httpx.post(f"{server.url}/deployer/approve/{deploy}", json={"reason": "  "}, headers=OPERATOR, timeout=10)
    assert answer.status_code == 200, answer.text
    resumed = next(e for e in claim_view(server, "deployer", deploy)["events"] if e["operation"] == "resume")
    assert "reason" not in resumed["evidence"]
