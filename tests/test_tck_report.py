"""`make tck`'s reading of the TCK's compatibility reports: a variant run's results replace the main run's for the
requirements it decides, and the verdict fails on a MUST failure that is not a listed TCK defect or on a MUST skip."""

import json
from pathlib import Path
from typing import Any

from tck_run.report import judge, merged, outcomes, table


def report(path: Path, per_requirement: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"per_requirement": per_requirement}))
    return path


def entry(level: str, **transports: str) -> dict[str, Any]:
    return {"level": level, "status": "?", "transports": transports, "errors": []}


def test_a_variant_decides_its_requirements_and_a_silent_one_fails(tmp_path: Path) -> None:
    main = outcomes(report(tmp_path / "main.json", {
        "CORE-CAP-001": entry("MUST", jsonrpc="SKIPPED", http_json="SKIPPED"),
        "CORE-CAP-002": entry("MUST", jsonrpc="SKIPPED"),
        "CORE-GET-001": entry("MUST", jsonrpc="PASS", grpc="PASS"),
    }), "main")
    minimal = outcomes(report(tmp_path / "minimal.json", {
        "CORE-CAP-001": entry("MUST", jsonrpc="PASS", http_json="PASS"),
        "CORE-GET-001": entry("MUST", jsonrpc="FAIL"),
    }), "minimal", frozenset({"CORE-CAP-001", "CORE-CAP-002"}))
    results = merged(main, [(frozenset({"CORE-CAP-001", "CORE-CAP-002"}), minimal)])
    by_key = {(o.requirement, o.binding): (o.status, o.run) for o in results}
    assert by_key == {
        ("CORE-CAP-001", "jsonrpc"): ("PASS", "minimal"),
        ("CORE-CAP-001", "http_json"): ("PASS", "minimal"),
        ("CORE-CAP-002", "jsonrpc"): ("FAIL", "minimal"),
        ("CORE-GET-001", "jsonrpc"): ("PASS", "main"),
        ("CORE-GET-001", "grpc"): ("PASS", "main"),
    }
    verdict = judge(results)
    assert [(o.requirement, o.binding) for o in verdict.failures] == [("CORE-CAP-002", "jsonrpc")]
    assert not verdict.passed
    assert "| jsonrpc | 2 / 1 / 0 |" in table(results)


def test_a_listed_defect_does_not_fail_the_run_but_a_skip_does(tmp_path: Path) -> None:
    results = outcomes(report(tmp_path / "main.json", {
        "CORE-SEND-003": entry("MUST", jsonrpc="FAIL", http_json="FAIL"),
        "CARD-CACHE-001": entry("SHOULD", agent_card="FAIL"),
    }), "main")
    verdict = judge(results)
    assert verdict.passed and len(verdict.defects) == 2
    skipped = outcomes(report(tmp_path / "skip.json", {"PUSH-CREATE-001": entry("MUST", grpc="SKIPPED")}), "main")
    assert not judge(skipped).passed
