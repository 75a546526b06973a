"""echo: an existing a2a-sdk executor (examples/sdk_executor.py) served by the bridge unchanged, through a factory:

    .venv/bin/a2a-bridge serve --agent examples.wrapped_agent:make_agent
"""

from a2a.types import AgentCapabilities, AgentCard, AgentSkill

from a2a_bridge import Agent
from examples.sdk_executor import EchoExecutor


def make_agent() -> Agent:
    """Called once at start-up by `serve --agent examples.wrapped_agent:make_agent`."""
    card = AgentCard(
        name="echo",
        description="Echoes the user's text back.",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Echoes the text it gets.", tags=["example"])],
    )
    return Agent("echo", card, EchoExecutor(), repeat_safe=True)
