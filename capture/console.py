"""The replayer's terminal output: a progress bar, one line per block, and a table of each failing block's diff."""

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from a2a_bridge.capture.allowances import Allowed
from a2a_bridge.capture.compare import Difference, short
from a2a_bridge.capture.replay import BlockResult


def _sides(difference: Difference) -> tuple[str, str]:
    """What to show as recorded and as live for one difference."""
    def shown(value: object) -> str:
        return value if isinstance(value, str) else short(value)

    if difference.kind in ("missing key", "missing item"):
        return shown(difference.recorded), "(absent)"
    if difference.kind in ("unexpected key", "unexpected item"):
        return "(absent)", shown(difference.live)
    if difference.kind in ("id", "open", "error", "missing") or difference.recorded is difference.live is None:
        return shown(difference.recorded) if difference.recorded is not None else "", difference.detail
    return shown(difference.recorded), shown(difference.live)


def diff_lines(differences: Sequence[Difference]) -> list[str]:
    """Rich markup lines: each difference's JSON path and kind, then what was recorded and what the server sent."""
    lines = []
    for difference in differences:
        recorded, live = _sides(difference)
        lines.append(f"  [bold]{escape(difference.path)}[/bold] [dim]{difference.kind}[/dim]")
        lines.append(f"      recorded: [green]{escape(recorded)}[/green]")
        lines.append(f"      live:     [red]{escape(live)}[/red]")
    return lines


class RichReporter:
    """Shows progress while the replay runs and prints pass or fail per block as each finishes."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=False, highlight=False)
        self.progress = Progress(
            TextColumn("[bold]replay"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.task = self.progress.add_task("replay", total=0)

    def start(self, total: int) -> None:
        self.progress.update(self.task, total=total)
        self.progress.start()

    def report(self, result: BlockResult) -> None:
        out = self.progress.console
        for note in result.narration:
            out.print(f"  [dim]# {escape(note)}[/dim]")
        if result.failures:
            out.print(f"[bold red]FAIL[/] {escape(result.name)}")
            for line in diff_lines(result.failures):
                out.print(line, soft_wrap=True)
        else:
            extra = f" [yellow]({len(result.allowed)} allowed)[/]" if result.allowed else ""
            out.print(f"[green]pass[/] {escape(result.name)}{extra}")
        self.progress.advance(self.task)

    def finish(self, results: Sequence[BlockResult], unused: Sequence[Allowed]) -> None:
        self.progress.stop()
        allowed = [(result, d, entry) for result in results for d, entry in result.allowed]
        if allowed:
            self.console.print("[bold yellow]allowed differences[/] (documented, not failures):")
            for entry in dict.fromkeys(entry for _, _, entry in allowed):
                self.console.print(f"  [yellow]{escape(entry.reason)}[/]", soft_wrap=True)
                for result, difference, _ in (item for item in allowed if item[2] is entry):
                    self.console.print(f"    {escape(result.file)} #{escape(result.label)} {escape(difference.path)}", soft_wrap=True)
        for entry in unused:
            self.console.print(f"[dim]allow entry not used: {escape(str(entry))}[/dim]", soft_wrap=True)
        failed = [result for result in results if result.failures]
        passed = len(results) - len(failed)
        style = "bold red" if failed else "bold green"
        self.console.print(f"[{style}]{passed} passed, {len(failed)} failed[/] ({len(allowed)} allowed differences)")
        for result in failed:
            self.console.print(f"  [red]failed[/] {escape(result.name)}")

    def error(self, message: str) -> None:
        """A usage error: one line on stderr."""
        self.progress.stop()
        Console(stderr=True, highlight=False).print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
