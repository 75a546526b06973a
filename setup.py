"""The build's one step beyond pyproject.toml: the modules every request runs through, compiled to C by mypyc.

mypyc turns a type-annotated module into a C extension that runs the same code without the interpreter's loop (calls
between compiled modules are C calls, attributes of their classes are struct fields): a trivial SendMessage takes
about a tenth fewer instructions. The `.py` files stay beside the extensions and are what runs wherever the build
could not compile them (no C compiler: each extension is optional) or was told not to (`A2A_BRIDGE_COMPILE=0`). The
package's metadata is all in pyproject.toml.
"""

import os
from pathlib import Path

from setuptools import Extension, setup

COMPILED = [
    "core/claims", "core/clock", "core/errors", "core/ids", "core/states", "core/task_events", "core/task_status",
    "http/agent_mounts", "http/binding_paths", "http/direct_rpc", "http/front_door", "http/json_bodies",
    "http/limits", "http/media_type", "http/message_checks", "http/request_body", "http/request_guard",
    "push/attempts", "push/config_rows", "push/logged_events", "push/outbox", "push/webhook_connection",
    "push/webhook_wire", "push/workers", "store/column_json", "store/delivery_batch", "store/event_rows",
    "store/group_commit", "store/item_texts", "store/ledger", "store/ledger_batch", "store/ledger_tables",
    "store/pg_batch", "store/pg_save_statement", "store/pg_session", "store/proto_json", "store/push_rows",
    "store/sql_deliveries",
    "tasks/eager", "tasks/host_env", "tasks/idempotency", "tasks/live_tasks", "tasks/mailbox", "tasks/task_writer",
    "tasks/turns",
]
"""The modules of a2a_bridge that mypyc compiles: those of a request's path and of the group commit's, less those it
cannot compile (async generators; classes whose base is another library's, such as the SDK's executor interfaces, which
hung or failed to build compiled), and the push outbox's delivery path. A class that other code subclasses is marked
`mypyc_attr(allow_interpreted_subclasses=True)`."""

GROUPS = {"native_requests": ("http", "tasks"), "native_store": ("core", "store"), "native_push": ("push",)}
"""mypyc's groups of COMPILED, by the layers each holds: one C file and one shared runtime `a2a_bridge/NAME__mypyc*.so`
per group, compiled side by side (build_ext's `parallel`). One file of the request path's 34 modules took gcc about
four minutes on one core; in two groups they took a minute and a half on two cores, and less CPU in all. Calls within
a group are direct C calls, calls between groups go through a table of pointers."""

MYPY_OPTIONS = ["--no-site-packages", "--ignore-missing-imports", "--follow-imports=silent"]
"""The same build wherever it runs: mypyc reads no installed package (a reinstall into a virtualenv would otherwise see
the dependencies a first install had not yet installed), so the dependencies' types are any object to the compiled
code, which leaves their checks to the libraries; the modules not compiled are read only for their types."""


def extensions() -> list[Extension]:
    """mypyc's extensions of COMPILED, each optional; none when told not to compile, or without mypyc."""
    if os.environ.get("A2A_BRIDGE_COMPILE", "1") == "0":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        return []
    groups = [
        ([str(Path("a2a_bridge", f"{name}.py")) for name in COMPILED if name.split("/")[0] in layers],
         f"a2a_bridge.{group}")
        for group, layers in GROUPS.items()
    ]
    built = mypycify(MYPY_OPTIONS + [path for paths, _ in groups for path in paths], separate=groups)
    for extension in built:
        extension.optional = True
    return built


setup(ext_modules=extensions(), options={"build_ext": {"parallel": os.cpu_count() or 1}})
