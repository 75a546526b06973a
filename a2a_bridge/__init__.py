"""a2a-bridge: an A2A 1.0 agent server on a2a-sdk that keeps every task accounted for.

The public API for serving your own agent (docs/your-agent.md): `Agent`, `ActionRoute` with the bridge's `AUTHORIZE`
and `REVIEW`, `open_window`, `resume_signal`, `APPROVED`, `WHO_MUST_ACT` and `who_must_act_extension`."""

import sys

from a2a_bridge.core.observability import sdk_tracing_from_argv

sdk_tracing_from_argv(sys.argv)

# After the tracing switch: these import the SDK.
from a2a_bridge.agent import Agent, open_window, resume_signal  # noqa: E402
from a2a_bridge.core.task_status import WHO_MUST_ACT, who_must_act_extension  # noqa: E402
from a2a_bridge.http.bridge_routes import APPROVED, AUTHORIZE, REVIEW, ActionRoute  # noqa: E402

__all__ = [
    "APPROVED",
    "AUTHORIZE",
    "REVIEW",
    "WHO_MUST_ACT",
    "ActionRoute",
    "Agent",
    "open_window",
    "resume_signal",
    "who_must_act_extension",
]
