"""The TCK's results as this project reads them: each requirement's status per binding (from the TCK's
`reports/compatibility.json`), the runs against the agent's variants merged in, counted per binding and level, and
judged: a MUST that fails, other than a listed TCK defect, or is skipped, fails the run."""

import json
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tck_run.defects import known

LEVELS = ("MUST", "SHOULD", "MAY")
STATUSES = ("PASS", "FAIL", "SKIPPED")
BINDINGS = ("jsonrpc", "http_json", "grpc", "agent_card")


@dataclass(frozen=True)
class Outcome:
    """One requirement on one binding."""

    requirement: str
    level: str
    binding: str
    status: str
    run: str
    errors: tuple[str, ...] = ()


def outcomes(compatibility: Path, run: str, only: frozenset[str] | None = None) -> list[Outcome]:
    """Every (requirement, binding) the TCK reported in one run; `only` keeps the requirements that run was for."""
    per_requirement: dict[str, Any] = json.loads(compatibility.read_text())["per_requirement"]
    return [
        Outcome(requirement, entry["level"], binding, status, run, tuple(str(e)[:400] for e in entry.get("errors", [])))
        for requirement, entry in sorted(per_requirement.items())
        if only is None or requirement in only
        for binding, status in sorted(entry.get("transports", {}).items())
    ]


def merged(main: list[Outcome], variants: list[tuple[frozenset[str], list[Outcome]]]) -> list[Outcome]:
    """The main run's outcomes with those of the requirements a variant run decides replaced by that run's; one the
    variant run recorded nothing for (its test broke before recording) is a failure."""
    replaced = {(o.requirement, o.binding): o for _, outcomes in variants for o in outcomes}
    decided = {requirement: outcomes[0].run if outcomes else "" for ids, outcomes in variants for requirement in ids}
    results = []
    for o in main:
        if (o.requirement, o.binding) in replaced:
            continue
        if o.requirement in decided:
            o = replace(o, status="FAIL", run=decided[o.requirement], errors=("the variant run recorded no result",))
        results.append(o)
    return sorted([*results, *replaced.values()], key=lambda o: (o.requirement, o.binding))


def table(results: list[Outcome]) -> str:
    """Markdown: per binding and level, how many requirements passed, failed and were skipped."""
    counts = Counter((o.binding, o.level, o.status) for o in results)
    header = "| binding | " + " | ".join(f"{level} pass / fail / skip" for level in LEVELS) + " |"
    lines = [header, "|---|" + "---|" * len(LEVELS)]
    for binding in BINDINGS:
        cells = [" / ".join(str(counts[(binding, level, status)]) for status in STATUSES) for level in LEVELS]
        lines.append(f"| {binding} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Verdict:
    failures: list[Outcome]
    """MUST failures that are not listed TCK defects."""
    defects: list[Outcome]
    """MUST failures explained by a listed TCK defect."""
    skips: list[Outcome]
    """MUST requirements the TCK skipped."""

    @property
    def passed(self) -> bool:
        return not self.failures and not self.skips


def judge(results: list[Outcome]) -> Verdict:
    must = [o for o in results if o.level == "MUST"]
    failed = [o for o in must if o.status == "FAIL"]
    return Verdict(
        failures=[o for o in failed if known(o.requirement, o.binding) is None],
        defects=[o for o in failed if known(o.requirement, o.binding) is not None],
        skips=[o for o in must if o.status == "SKIPPED"],
    )


def untested(compatibility: Path) -> Counter[str]:
    """Requirements the TCK has no test for ('NOT TESTED'), per level."""
    per_requirement: dict[str, Any] = json.loads(compatibility.read_text())["per_requirement"]
    return Counter(entry["level"] for entry in per_requirement.values() if entry["status"] == "NOT TESTED")
