"""The CLI's tables: ASCII boxes (as `artemis queue stat` prints them), printed at their full
width whatever the terminal's, so a pipe or a narrow window never wraps a row."""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["print_table"]


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[str] = (),
                caption: str | None = None) -> None:
    """`rows` of strings under `headers`; columns named in `right` (numbers) align right."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.ASCII, show_edge=True, pad_edge=True, highlight=False, caption=caption)
    for header in headers:
        table.add_column(header, justify="right" if header in right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    needed = sum(widths) + 3 * len(widths) + 1
    console = Console(highlight=False, soft_wrap=False)
    if console.width < needed:
        console = Console(highlight=False, soft_wrap=False, width=needed)
    console.print(table)
