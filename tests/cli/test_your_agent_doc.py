"""docs/your-agent.md's from-scratch agent runs as the doc shows it (issue 32 item 7): its Python block, read from the
doc (imports and card included), is the whole of examples/hello_agent.py, and its executor is portable: the same code
greets on the bridge and on the stock SDK's own server, whose handler refuses a new task's first event unless it is a
`Task` (`InvalidAgentResponseError`)."""

import ast
import re
import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from a2a_bridge.app import Bridge
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.stock_sdk import stock_app
from tests.support import rpc, serve_in_thread, user_message

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Writing an agent from scratch"


def doc_code() -> str:
    """The first Python block of the doc's from-scratch section."""
    text = (ROOT / "docs" / "your-agent.md").read_text()
    section = text[text.index(SECTION):]
    section = section[: section.index("\n## ", len(SECTION))]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"no Python block under {SECTION!r}"
    return match.group(1)


@pytest.fixture(scope="module")
def hello() -> types.ModuleType:
    """The doc's code, run as a module of its own."""
    module = types.ModuleType("your_agent_doc")
    exec(compile(doc_code(), "docs/your-agent.md", "exec"), module.__dict__)  # noqa: S102 - the doc's own code
    return module


def test_the_docs_block_is_the_whole_example_less_its_docstring() -> None:
    source = (ROOT / "examples" / "hello_agent.py").read_text()
    docstring = ast.get_docstring(ast.parse(source), clean=False)
    assert docstring is not None
    body = source[source.index('"""', source.index(docstring)) + 3:].lstrip("\n")
    assert doc_code() == body


def greeting(base: str, name: str) -> dict:
    task = rpc(base, "SendMessage", {"message": user_message(name, f"doc-{uuid.uuid4()}")})["result"]["task"]
    texts = [part["text"] for artifact in task.get("artifacts", []) for part in artifact["parts"]]
    return {"state": task["status"]["state"], "texts": texts, "history": len(task["history"])}


@pytest.fixture
def on_the_bridge(hello: types.ModuleType) -> Iterator[str]:
    bridge = Bridge([hello.agent], Stores(StoreConfig.parse("memory")), SystemClock(), lambda: str(uuid.uuid4()))
    with serve_in_thread(bridge.app()) as url:
        yield f"{url}/{hello.agent.name}"


@pytest.fixture
def on_the_stock_sdk(hello: types.ModuleType) -> Iterator[str]:
    with serve_in_thread(stock_app(hello.agent.executor)) as url:
        yield url


def test_the_docs_agent_greets_on_the_bridge(on_the_bridge: str) -> None:
    assert greeting(on_the_bridge, "Ada") == {"state": "TASK_STATE_COMPLETED", "texts": ["Hello, Ada!"], "history": 1}


def test_the_docs_executor_greets_on_the_stock_sdk(on_the_stock_sdk: str) -> None:
    assert greeting(on_the_stock_sdk, "Grace") == {"state": "TASK_STATE_COMPLETED", "texts": ["Hello, Grace!"], "history": 1}
