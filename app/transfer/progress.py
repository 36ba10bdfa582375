"""Progress bars on stderr (rich), so stdout carries only data (an export to `-`)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def progress(quiet: bool = False) -> Progress:
    """A bar that draws only on a terminal (and never with `quiet`): a log or a pipe gets
    the command's summary line, not redraws."""
    console = Console(stderr=True, quiet=quiet)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
        disable=quiet or not console.is_terminal,
    )
