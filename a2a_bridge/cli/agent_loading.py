"""`serve --agent MODULE:ATTRIBUTE`: a user's agent, found in the current directory (last on the import path, so that
nothing there shadows the server's own dependencies) or on the import path, and each way that can fail told in one
line."""

import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
from pathlib import Path

from a2a.server.agent_execution import AgentExecutor

from a2a_bridge.agent import Agent

MAX_DETAIL = 300
"""The most characters of an exception's text a refusal quotes."""


class AgentLoadError(Exception):
    """Why an agent reference cannot be served, in one line."""


def is_reference(text: str) -> bool:
    """Whether an `--agent` value names the user's agent (`MODULE:ATTRIBUTE`) rather than a built-in one."""
    return ":" in text


def detail(error: BaseException) -> str:
    """An exception as `Type: text` on one line."""
    text = " ".join(str(error).split())
    if len(text) > MAX_DETAIL:
        text = text[:MAX_DETAIL] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def current_directory_last() -> None:
    """Put the current directory on the import path after everything else (where `python -m` put it first, moved), so
    that a module there (a `uvloop.py`, say) never shadows one the server imports."""
    here = os.getcwd()
    sys.path[:] = [entry for entry in sys.path if entry not in ("", here)] + [here]


def shadowing(module_name: str) -> str | None:
    """Where the installed module is that a module of this name in the current directory would be hidden by, if any."""
    top = module_name.split(".", 1)[0]
    here = os.getcwd()
    if importlib.machinery.PathFinder.find_spec(top, [here]) is None:
        return None
    found = importlib.util.find_spec(top)
    if found is None:
        return None
    place = found.origin or next(iter(found.submodule_search_locations or []), "")
    if place in ("built-in", "frozen"):
        return f"Python's {place} {top}"
    if not place or Path(place).resolve().is_relative_to(Path(here).resolve()):
        return None
    return place


def load_agent(reference: str) -> Agent:
    """The `Agent` that `MODULE:ATTRIBUTE` names: the attribute itself, or what it returns when called with no
    arguments; `AgentLoadError` for a module that does not import, a missing attribute, anything else."""
    module_name, _, path = reference.partition(":")
    if not module_name or not path:
        raise AgentLoadError(f"--agent {reference}: expected MODULE:ATTRIBUTE, e.g. examples.hello_agent:agent")
    current_directory_last()
    hidden_by = shadowing(module_name)
    if hidden_by is not None:
        raise AgentLoadError(
            f"--agent {reference}: {module_name.split('.', 1)[0]!r} in {os.getcwd()} has the name of an installed module"
            f" ({hidden_by}), which the server imports first; rename yours"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if missing and (module_name == missing or module_name.startswith(f"{missing}.")):
            raise AgentLoadError(
                f"--agent {reference}: no module named {module_name!r} (looked in {os.getcwd()} and the import path)"
            ) from None
        raise AgentLoadError(f"--agent {reference}: module {module_name!r} did not import: {detail(error)}") from None
    except Exception as error:  # noqa: BLE001 - whatever the user's module raises, told in one line
        raise AgentLoadError(f"--agent {reference}: module {module_name!r} did not import: {detail(error)}") from None
    found: object = module
    for name in path.split("."):
        if not hasattr(found, name):
            raise AgentLoadError(f"--agent {reference}: module {module_name!r} has no attribute {path!r}")
        found = getattr(found, name)
    return agent_from(reference, found)


def agent_from(reference: str, found: object) -> Agent:
    """`found` if it is an `Agent`, else what it returns as a zero-argument factory."""
    if isinstance(found, Agent):
        return found
    if isinstance(found, AgentExecutor) or (isinstance(found, type) and issubclass(found, AgentExecutor)):
        raise AgentLoadError(
            f"--agent {reference}: an AgentExecutor, not an agent; serve a2a_bridge.Agent(name, card, executor)"
            " (docs/your-agent.md)"
        )
    if not callable(found):
        raise AgentLoadError(
            f"--agent {reference}: a value of type {type(found).__name__}, not an a2a_bridge.Agent or a function"
            " returning one"
        )
    try:
        inspect.signature(found).bind()
    except TypeError:
        raise AgentLoadError(f"--agent {reference}: a factory is called with no arguments, and this one needs some") from None
    except ValueError:
        pass  # no signature to read (a builtin): calling it tells
    try:
        made = found()
    except Exception as error:  # noqa: BLE001 - whatever the user's factory raises, told in one line
        raise AgentLoadError(f"--agent {reference}: the factory raised {detail(error)}") from None
    if inspect.iscoroutine(made):
        made.close()
        raise AgentLoadError(f"--agent {reference}: the factory is async; it must return the Agent itself")
    if not isinstance(made, Agent):
        raise AgentLoadError(f"--agent {reference}: the factory returned a value of type {type(made).__name__}, not an a2a_bridge.Agent")
    return made
