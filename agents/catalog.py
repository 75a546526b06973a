"""The three sample agents as the bridge serves them, with the kit's demo token and signing key."""

import json
from collections.abc import Callable, Iterable
from pathlib import Path

from a2a_bridge.agents import bench, code_reviewer, conformance, deployer, test_runner
from a2a_bridge.app import AgentSpec
from a2a_bridge.core.auth import Principal
from a2a_bridge.http.bridge_routes import AUTHORIZE, REVIEW

DEPLOYER_TOKEN = "dpl_test_7c1e4b"
DEPLOYER_SIGNING_KEY = "deployer-demo-signing-key"
SAMPLE_AGENTS = ("test-runner", "code-reviewer", "deployer")
DOCUMENTED_AGENTS = (*SAMPLE_AGENTS, *conformance.VARIANTS)
"""The agents `--agent` offers; it also takes `bench`, the benchmark's trivial agent, which its help does not list."""
AGENT_NAMES = (*DOCUMENTED_AGENTS, "bench")


def ledger_writer(path: Path | None) -> Callable[[str, str], None]:
    """Appends one line per deploy actually rolled out, so tests can count side effects."""

    def record(task_id: str, build: str) -> None:
        if path is not None:
            with path.open("a", encoding="utf-8") as ledger:
                ledger.write(json.dumps({"taskId": task_id, "build": build}) + "\n")

    return record


def sample_agents(pace: float = 0.25, new_id: Callable[[], str] | None = None, deploy_ledger: Path | None = None) -> list[AgentSpec]:
    return [
        AgentSpec("test-runner", test_runner.card(), test_runner.TestRunner(pace, new_id=new_id)),
        AgentSpec(
            "code-reviewer", code_reviewer.card(), code_reviewer.CodeReviewer(pace, new_id=new_id), actions=(REVIEW,)
        ),
        AgentSpec(
            "deployer",
            deployer.card(),
            deployer.Deployer(pace, new_id=new_id, record=ledger_writer(deploy_ledger)),
            extended_card=deployer.extended_card(),
            tokens={DEPLOYER_TOKEN: Principal("deployer-client")},
            signing_key=DEPLOYER_SIGNING_KEY,
            approvals=True,
            actions=(AUTHORIZE,),
        ),
    ]


def served_agents(
    names: Iterable[str], pace: float = 0.25, new_id: Callable[[], str] | None = None, deploy_ledger: Path | None = None
) -> list[AgentSpec]:
    """The named agents, each once, in the order named: the sample agents, the TCK's conformance agent (and its
    variants) and the benchmark's trivial agent."""
    specs = {spec.name: spec for spec in sample_agents(pace, new_id, deploy_ledger)}
    for name in conformance.VARIANTS:
        specs[name] = AgentSpec(
            name,
            conformance.card(name),
            conformance.Conformance(conformance.streaming_timeout(), new_id=new_id),
            extended_card=conformance.extended_card(name),
            retries=False,
            webhook_policy=conformance.LoopbackWebhooks(),
        )
    specs["bench"] = AgentSpec("bench", bench.card(), bench.Bench())
    return [specs[name] for name in dict.fromkeys(names)]
