"""The operator's commands: `a2a-bridge tasks`, `status TASK [--watch]`, `approve TASK`, `reconcile TASK` and
`cancel TASK`, over HTTP against a running server. Each finds a task's agent through the console API unless `--agent`
names it."""

import argparse
import json
import os
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
from httpx_sse import connect_sse
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from a2a_bridge.core.arg_types import http_url, positive_count
from a2a_bridge.core.config import DEMO_OPERATOR_TOKEN
from a2a_bridge.http.operator_reasons import MAX_REASON

DEFAULT_URL = "http://127.0.0.1:8000"
TOKEN_ENV = "A2A_BRIDGE_TOKEN"
URL_ENV = "A2A_BRIDGE_URL"
OUTCOMES = ("completed", "cancelled", "continue", "uncertain")
STATE_STYLES = {
    "COMPLETED": "green",
    "WORKING": "cyan",
    "SUBMITTED": "cyan",
    "AUTH_REQUIRED": "bold yellow",
    "INPUT_REQUIRED": "yellow",
    "FAILED": "red",
    "REJECTED": "red",
    "CANCELED": "magenta",
}


class CommandError(Exception):
    """A failure to tell the operator in one line; the command exits 1."""


class Refused(CommandError):
    """The server answered with an error status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Operator:
    """An HTTP client of one server, as the operator (or whoever the token names)."""

    def __init__(self, url: str, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """The JSON body of a 2xx answer; otherwise a CommandError with the server's message."""
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise CommandError(f"cannot reach {self.url}: {error}") from error
        if response.is_success:
            return dict(response.json())
        raise Refused(f"{method} {path}: {response.status_code} {error_message(response)}", response.status_code)

    def agent_of(self, task_id: str, agent: str | None) -> str:
        """The agent named on the command line, else the one the console API says runs the task."""
        if agent:
            return agent
        return str(self.request("GET", f"/console/api/tasks/{task_id}")["row"]["agent"])

    def status_stream(self, path: str) -> Iterator[dict[str, Any]]:
        """Each status object the server sends on a status stream, until it closes the stream after the terminal one."""
        try:
            with connect_sse(self.http, "GET", path, timeout=httpx.Timeout(30, read=None)) as events:
                response = events.response
                if not response.is_success:
                    response.read()
                    raise CommandError(f"GET {path}: {response.status_code} {error_message(response)}")
                for event in events.iter_sse():
                    if event.data:
                        yield event.json()
        except httpx.HTTPError as error:
            raise CommandError(f"cannot reach {self.url}: {error}") from error


def error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:200]
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("message")) if isinstance(error, dict) else json.dumps(body)[:200]


def short_state(state: str) -> str:
    return state.removeprefix("TASK_STATE_")


def styled_state(state: str) -> str:
    name = short_state(state)
    style = STATE_STYLES.get(name, "")
    return f"[{style}]{name}[/]" if style else name


def clock_time(stamp: str | None) -> str:
    """An ISO timestamp as the time of day (UTC), for people."""
    if not stamp:
        return ""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).strftime("%H:%M:%S")


def notification_text(notification: dict[str, Any], user: str) -> str:
    kind = notification.get("kind", "")
    since = clock_time(notification.get("since"))
    if kind == "user_auth_required":
        return f"{user} must sign in to {notification.get('provider')} (since {since})"
    if kind == "review_required":
        return f"{user} must decide the review (since {since})"
    return f"{kind} (since {since})"


def describe(status: dict[str, Any]) -> list[str]:
    """A status object as lines of Rich markup: the phase and revision, then what anyone must do."""
    inner = status["status"]
    phase = inner["phase"]
    if inner.get("terminal_reason"):
        phase = f"{phase} ({inner['terminal_reason']})"
    lines = [f"revision {escape(inner['revision'])}: [bold]{escape(phase)}[/]"]
    for notification in inner.get("notifications", []):
        lines.append(f"  waiting: {escape(notification_text(notification, status['responsible_user']))}")
    if inner.get("idle_expires_at"):
        lines.append(f"  idle: closes at {escape(clock_time(inner['idle_expires_at']))} without input")
    return lines


def task_details(row: dict[str, Any]) -> str:
    """A task's second line: Task Status phase and notifications; claim state, generation and lease; the actions."""
    status, claim = row["status"], row["claim"]
    phase = status["phase"] + (f" ({status['terminal_reason']})" if status.get("terminal_reason") else "")
    pending = claim["cancellation_requested"] and claim["state"] != "cancelled"
    parts = [f"phase {phase}"]
    waiting = [n["kind"] + (f":{n['provider']}" if n.get("provider") else "") for n in status["notifications"]]
    if waiting:
        parts.append("waiting for " + ", ".join(waiting))
    parts.append(f"claim {claim['state']}{' (cancel requested)' if pending else ''} gen {claim['claim_generation']}")
    if claim["lease_until"]:
        parts.append(f"lease until {clock_time(claim['lease_until'])}")
    if row["actions"]:
        parts.append("actions: " + ", ".join(row["actions"]))
    return " · ".join(parts)


def print_tasks(rows: list[dict[str, Any]], out: Console) -> None:
    """The tasks in the three views, two lines each so that 80 columns hold them: the full id, agent and A2A state,
    then (indented, wrapped to the terminal) the Task Status phase and notifications, the claim state, generation and
    lease, and what the operator may do."""
    id_width = max(len(row["id"]) for row in rows)
    agent_width = max(len("agent"), *(len(row["agent"]) for row in rows))
    out.print("tasks, newest first")
    out.print(f"[bold]{'task'.ljust(id_width)}  {'agent'.ljust(agent_width)}  A2A state[/]")
    for row in rows:
        task, agent = escape(row["id"].ljust(id_width)), escape(row["agent"].ljust(agent_width))
        out.print(f"{task}  {agent}  {styled_state(row['state'])}")
        out.print(Padding(escape(task_details(row)), (0, 0, 0, 4), expand=False))


def run_tasks(args: argparse.Namespace, operator: Operator, out: Console) -> None:
    rows = operator.request("GET", "/console/api/tasks", params={"limit": args.limit})["tasks"]
    if args.json:
        out.out(json.dumps({"tasks": rows}, indent=2, sort_keys=True), highlight=False)
    elif not rows:
        out.print("no tasks")
    else:
        print_tasks(rows, out)


def status_source(args: argparse.Namespace, operator: Operator) -> tuple[str, dict[str, Any]]:
    """Where to read the task's status, and the status read there: the console API, which answers the operator for
    any task (`--agent` must then name the task's agent); for a token the console refuses (401, 403), with
    `--agent`, the agent's own endpoint, which answers the task's owner and responsible user."""
    console = f"/console/api/tasks/{args.task}/status"
    try:
        status = operator.request("GET", console)
    except Refused as refused:
        if args.agent is None or refused.status not in (401, 403):
            raise
        path = f"/{args.agent}/tasks/{args.task}/status"
        return path, operator.request("GET", path)
    if args.agent is not None and status["agent"] != args.agent:
        raise CommandError(f"{args.task} is a task of {status['agent']}, not of {args.agent}")
    return console, status


def run_status(args: argparse.Namespace, operator: Operator, out: Console) -> None:
    """A task's Task Status for people: for the operator from the console API, for the task's owner (`--agent`) from
    the agent; with --watch, followed on its status stream."""
    path, status = status_source(args, operator)
    if not args.watch:
        out.print(f"[bold]{escape(args.task)}[/] ({escape(status['agent'])}, for {escape(status['responsible_user'])})")
        for line in describe(status):
            out.print(line)
        return
    out.print(f"watching [bold]{escape(args.task)}[/]; Ctrl-C to stop")
    for status in operator.status_stream(f"{path}/stream"):
        lines = describe(status)
        out.print(f"{datetime.now().strftime('%H:%M:%S')} {lines[0]}")
        for line in lines[1:]:
            out.print(line)
    out.print("the task has ended")


def with_reason(args: argparse.Namespace, body: dict[str, Any]) -> dict[str, Any]:
    """The action's JSON body, with `--reason` when given (the server keeps it in the claim's evidence)."""
    return {**body, "reason": args.reason} if args.reason else body


def run_approve(args: argparse.Namespace, operator: Operator, out: Console) -> None:
    agent = operator.agent_of(args.task, args.agent)
    operator.request("POST", f"/{agent}/approve/{args.task}", json=with_reason(args, {}))
    out.print(f"approved {escape(args.task)} ({escape(agent)}): the deploy resumes")


def reason_text(text: str) -> str:
    if len(text) > MAX_REASON:
        raise argparse.ArgumentTypeError(f"at most {MAX_REASON} characters")
    return text


def evidence_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not key or not sep:
        raise argparse.ArgumentTypeError("expected KEY=VALUE")
    return key, value


def run_reconcile(args: argparse.Namespace, operator: Operator, out: Console) -> None:
    agent = operator.agent_of(args.task, args.agent)
    body = with_reason(args, {"outcome": args.outcome, "evidence": dict(args.evidence)})
    view = operator.request("POST", f"/{agent}/tasks/{args.task}/reconcile", json=body)
    out.print(
        f"reconciled {escape(args.task)} ({escape(agent)}) as {args.outcome}: "
        f"claim {escape(view['state'])}, generation {view['claim_generation']}"
    )


def run_cancel(args: argparse.Namespace, operator: Operator, out: Console) -> None:
    agent = operator.agent_of(args.task, args.agent)
    answer = operator.request("POST", f"/{agent}/tasks/{args.task}/cancel", json=with_reason(args, {}))
    state = short_state(answer["state"])
    if state == "CANCELED":
        out.print(f"canceled {escape(args.task)} ({escape(agent)})")
    else:
        out.print(
            f"cancel recorded for {escape(args.task)} ({escape(agent)}), still {state}: "
            "reconcile it with --outcome cancelled once the work is known to have stopped"
        )


def run_redeliver(args: argparse.Namespace, operator: Operator, out: Console) -> None:
    agent = operator.agent_of(args.task, args.agent)
    body = {"configId": args.config} if args.config else {}
    answer = operator.request("POST", f"/{agent}/tasks/{args.task}/webhooks/redeliver", json=body)
    out.print(f"delivering {answer['redelivering']} dead letter(s) of {escape(args.task)} ({escape(agent)}) again")


def server_url(args: argparse.Namespace) -> str:
    """`--url`, else `$A2A_BRIDGE_URL`, else the default address."""
    if args.url is not None:
        return str(args.url)
    given = os.environ.get(URL_ENV)
    if not given:
        return DEFAULT_URL
    try:
        return http_url(given)
    except argparse.ArgumentTypeError as e:
        raise CommandError(f"${URL_ENV}: {e}") from None


def command(args: argparse.Namespace) -> int:
    """Run one operator command; 0 on success, 1 when the server refused or could not be reached (2 for a bad
    $A2A_BRIDGE_URL, as for a bad --url)."""
    out = Console(highlight=False)
    try:
        url = server_url(args)
    except CommandError as error:
        Console(stderr=True, highlight=False).print(f"[bold red]error:[/] {escape(str(error))}", soft_wrap=True)
        return 2
    operator = Operator(url, args.token or os.environ.get(TOKEN_ENV) or DEMO_OPERATOR_TOKEN)
    try:
        args.action(args, operator, out)
    except CommandError as error:
        Console(stderr=True, highlight=False).print(f"[bold red]error:[/] {escape(str(error))}", soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        operator.close()
    return 0


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add `tasks`, `status`, `approve`, `reconcile`, `cancel` and `redeliver` to the a2a-bridge command."""

    def add(name: str, help_text: str, action: Any, task: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text)
        if task:
            sub.add_argument("task", metavar="TASK", help="the task id")
            sub.add_argument("--agent", help="the task's agent (default: asked of the console API)")
        sub.add_argument("--url", type=http_url, help=f"the server (default: ${URL_ENV}, else {DEFAULT_URL})")
        sub.add_argument(
            "--token", help=f"bearer token (default: ${TOKEN_ENV}, else the demo operator token {DEMO_OPERATOR_TOKEN})",
        )
        sub.set_defaults(run=command, action=action, log_level="warning")
        return sub

    tasks = add("tasks", "a table of tasks across agents: A2A state, Task Status, claim", run_tasks, task=False)
    tasks.add_argument("--limit", type=positive_count, default=50, help="at most this many tasks, newest first")
    tasks.add_argument(
        "--json", action="store_true",
        help="print one JSON document, {\"tasks\": [...]}, each task as the console API gives it",
    )
    status = add("status", "a task's Task Status object, for people (with --agent, from the agent as the task's owner)", run_status)
    status.add_argument("--watch", action="store_true", help="follow the status stream until the task ends")
    approve = add("approve", "approve a deploy waiting for an operator", run_approve)
    reconcile = add("reconcile", "report the outcome of a task in needs_reconciliation", run_reconcile)
    reconcile.add_argument(
        "--outcome", required=True, choices=OUTCOMES,
        help="what became of the work: completed (it finished), cancelled (it stopped), continue (it stopped; the task"
        " runs on in a new claim generation) or uncertain (it stays in needs_reconciliation)",
    )
    reconcile.add_argument(
        "--evidence", required=True, nargs="+", action="extend", type=evidence_pair, metavar="KEY=VALUE",
        help="what shows the outcome (at least one)",
    )
    cancel = add("cancel", "cancel a task as the operator", run_cancel)
    for acting in (approve, reconcile, cancel):
        acting.add_argument(
            "--reason", type=reason_text, help="why (optional): kept in the claim's evidence, shown on the console's timeline",
        )
    redeliver = add("redeliver", "deliver a task's dead-lettered push notifications again", run_redeliver)
    redeliver.add_argument("--config", help="only this push config's (default: every dead letter of the task)")
