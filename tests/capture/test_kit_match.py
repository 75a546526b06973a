"""The kit comparison fails on real differences and tolerates only the allowances it is given."""

import pytest

from tests.kit_match import Allowance, Ids, match

TASK = "3d8f7801-f421-4e4e-aa2d-8b6da17d9281"
CONTEXT = "ac3830af-198c-422c-97e6-7ae3928f1c3a"
LIVE_TASK = "11111111-1111-4111-8111-111111111111"
LIVE_CONTEXT = "22222222-2222-4222-8222-222222222222"


def ids() -> Ids:
    return Ids({"http://localhost:41243": "http://127.0.0.1:9/deployer"})


def recorded_task(state: str = "TASK_STATE_COMPLETED", text: str = "1 failed, 11 passed") -> dict:
    return {
        "id": TASK,
        "contextId": CONTEXT,
        "status": {
            "state": state,
            "message": {"taskId": TASK, "parts": [{"text": text}]},
            "timestamp": "2026-10-06T09:00:00.750Z",
        },
        "artifacts": [{"artifactId": "summary", "parts": [{"data": {"passed": 11}}]}],
    }


def live_task(**changes: object) -> dict:
    task = recorded_task()
    task.update(id=LIVE_TASK, contextId=LIVE_CONTEXT)
    task["status"] = {**task["status"], "timestamp": "2026-11-29T23:53:41.568291Z"}
    task["status"]["message"] = {**task["status"]["message"], "taskId": LIVE_TASK}
    task.update(changes)
    return task


def test_ids_bind_once_and_timestamps_match_any_time() -> None:
    bound = ids()
    match(recorded_task(), live_task(), bound)
    assert bound[TASK] == LIVE_TASK and bound[CONTEXT] == LIVE_CONTEXT
    approval = bound.translate(f"http://localhost:41243/approve/{TASK}")
    assert approval == f"http://127.0.0.1:9/deployer/approve/{LIVE_TASK}"


def test_an_id_bound_elsewhere_must_stay_the_same() -> None:
    task = live_task()
    task["status"]["message"]["taskId"] = "33333333-3333-4333-8333-333333333333"
    with pytest.raises(AssertionError, match="status.message.taskId"):
        match(recorded_task(), task, ids())


def test_two_recorded_ids_cannot_share_one_live_id() -> None:
    with pytest.raises(AssertionError, match="already stands for"):
        match(recorded_task(), live_task(contextId=LIVE_TASK), ids())


@pytest.mark.parametrize(
    "live",
    [
        live_task(status={**live_task()["status"], "state": "TASK_STATE_FAILED"}),
        live_task(status={**live_task()["status"], "message": {"taskId": LIVE_TASK, "parts": [{"text": "13 passed"}]}}),
        live_task(status={**live_task()["status"], "timestamp": "yesterday"}),
        live_task(artifacts=[{"artifactId": "test-log", "parts": [{"data": {"passed": 11}}]}]),
        live_task(artifacts=[{"artifactId": "summary", "parts": [{"data": {"passed": 12.0}}]}]),
        live_task(artifacts=[]),
        live_task(extra=True),
    ],
)
def test_real_differences_fail(live: dict) -> None:
    with pytest.raises(AssertionError):
        match(recorded_task(), live, ids(), set(Allowance))


def test_floats_need_their_allowance() -> None:
    floats = live_task(artifacts=[{"artifactId": "summary", "parts": [{"data": {"passed": 11.0}}]}])
    with pytest.raises(AssertionError, match="expected 11, got 11.0"):
        match(recorded_task(), floats, ids())
    match(recorded_task(), floats, ids(), {Allowance.INTEGRAL_FLOATS})


def test_key_order_needs_its_allowance() -> None:
    recorded = {"jsonrpc": "2.0", "id": 1, "result": {}}
    live = {"result": {}, "id": 1, "jsonrpc": "2.0"}
    with pytest.raises(AssertionError, match="keys in order"):
        match(recorded, live, ids())
    match(recorded, live, ids(), {Allowance.KEY_ORDER})


def test_error_details_keep_their_shape() -> None:
    violation = {"field": "message.messageId", "description": "messageId is required"}
    recorded = {
        "code": -32602,
        "data": [{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [violation]}],
    }
    info = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "INVALID_PARAMS",
        "domain": "a2a-protocol.org",
        "metadata": {"errors": [{"field": "message.messageId", "message": "messageId is required"}]},
    }
    live = {"code": -32602, "data": [info, recorded["data"][0]]}
    allow = {Allowance.INVALID_PARAMS_ERROR_INFO}
    match(recorded, live, ids(), allow)
    with pytest.raises(AssertionError):
        match(recorded, live, ids())
    wrong = {**info, "metadata": {"errors": [{"field": "message.role", "message": "role must be ROLE_USER"}]}}
    with pytest.raises(AssertionError, match="ErrorInfo"):
        match(recorded, {"code": -32602, "data": [wrong, recorded["data"][0]]}, ids(), allow)
    with pytest.raises(AssertionError, match="missing key"):
        match(recorded, {"code": -32602}, ids(), allow)


def test_empty_metadata_is_the_only_extra_key_tolerated() -> None:
    recorded = {"reason": "PUSH_NOTIFICATION_NOT_SUPPORTED"}
    allow = {Allowance.EMPTY_METADATA}
    match(recorded, {**recorded, "metadata": {}}, ids(), allow)
    with pytest.raises(AssertionError, match="unexpected key"):
        match(recorded, {**recorded, "metadata": {"x": "1"}}, ids(), allow)
