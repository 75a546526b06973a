"""`Agent`, the public description of an agent the bridge serves (docs/your-agent.md), and what its executor may ask
of the bridge during a turn: an operation window on the turn's claim, and the signal that resumed the turn."""

import re
from dataclasses import KW_ONLY, dataclass

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.types import AgentCard

from a2a_bridge.core.auth import Principal
from a2a_bridge.http.bridge_routes import ActionRoute
from a2a_bridge.push.webhooks import WebhookPolicy
from a2a_bridge.tasks.turn_execution import BridgeRequestContext

NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
"""An agent's name: the first segment of its paths (`/{name}/a2a/jsonrpc`)."""
TAKEN = ("console",)
"""Names whose paths the server answers itself (`/console/` is the operator console)."""


@dataclass
class Agent:
    """One agent as the bridge serves it: its name, card and executor, whether a turn may run again after a crash,
    and the who-must-act requests its users answer through the bridge."""

    name: str
    card: AgentCard
    executor: AgentExecutor
    _: KW_ONLY
    repeat_safe: bool | None = None
    """Whether running a turn again is safe when the server stopped in the middle of it: True, the turn runs again
    at the next start; False, the task waits in AUTH_REQUIRED for an operator's reconcile. None: the executor's own
    `repeat_safe` attribute, else True."""
    actions: tuple[ActionRoute, ...] = ()
    """The who-must-act requests its users answer through the bridge (POST /tasks/{id}/{path})."""
    approvals: bool = False
    """Whether the operator's `POST /approve/{id}` resumes its tasks with the signal `approved`."""
    extended_card: AgentCard | None = None
    """The card authenticated callers get from GetExtendedAgentCard."""
    tokens: dict[str, Principal] | None = None
    """The agent's own demo tokens; an agent with tokens requires one (401 otherwise). Not used under require_auth."""
    signing_key: str | None = None
    """An HS256 key the public card is signed with."""
    retries: bool = True
    """Whether a messageId a caller sends again is a retry of that message (idempotent); off only where a client
    reuses messageIds by design."""
    webhook_policy: WebhookPolicy | None = None
    """Where this agent's webhooks may go, instead of the configuration's policy (the TCK's conformance agent: loopback
    only, where the TCK's webhook receiver runs)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.fullmatch(self.name):
            raise ValueError(f"agent name {self.name!r}: use lowercase letters, digits, '-' and '_'")
        if self.name in TAKEN:
            raise ValueError(f"agent name {self.name!r}: /{self.name}/ is the server's own; choose another name")
        if not isinstance(self.card, AgentCard):
            raise TypeError(f"agent {self.name}: card is a {type(self.card).__name__}, not an a2a.types.AgentCard")
        if not isinstance(self.executor, AgentExecutor):
            raise TypeError(
                f"agent {self.name}: executor is a {type(self.executor).__name__}, not an"
                " a2a.server.agent_execution.AgentExecutor"
            )
        self.actions = tuple(self.actions)
        if not all(isinstance(action, ActionRoute) for action in self.actions):
            raise TypeError(f"agent {self.name}: actions must be ActionRoute values")

    @property
    def safe_to_repeat(self) -> bool:
        """`repeat_safe` as decided: the agent's, else its executor's, else True."""
        if self.repeat_safe is not None:
            return self.repeat_safe
        return bool(getattr(self.executor, "repeat_safe", True))


async def open_window(context: RequestContext, stage: str, seconds: int) -> None:
    """Hold this turn's claim for a named long step of 1 to 3,600 seconds (an operation window), beyond the lease the
    bridge renews by itself; outside the bridge (e.g. under the SDK's own server) it does nothing."""
    if isinstance(context, BridgeRequestContext):
        await context.open_window(stage, seconds)


def resume_signal(context: RequestContext) -> str | None:
    """The signal that resumed this turn (`approved`, `authorized:PROVIDER`, `review:post`, `{signal}:{value}` of an
    `ActionRoute`), or None for a turn a message started (and outside the bridge)."""
    if isinstance(context, BridgeRequestContext):
        return context.signal
    return None
