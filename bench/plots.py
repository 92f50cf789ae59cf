"""PNG bar charts of the tables in ``report.py``: one file per benchmark, one panel per row.

Each panel puts the columns side by side (ours, the peer, the limits): a bar at the median and a line over
the range of the values. Throughput rows and latency rows get their own panels, each with its unit.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from bench.tables import Table

COLOURS = ("#2b6cb0", "#dd6b20", "#718096", "#a0aec0", "#38a169")


def plot_table(table: Table, path: Path) -> Path | None:
    """Write ``table`` as a PNG at ``path``; None (and no file) when it holds no figure at all."""
    rows = [row for row in table.rows if any(row.cells.get(key) for key in table.columns)]
    if not rows:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 4.2), squeeze=False)
    for axis, row in zip(axes[0], rows):
        keys = list(table.columns)
        medians, lows, highs = [], [], []
        for key in keys:
            values = row.cells.get(key, [])
            middle = statistics.median(values) if values else 0.0
            medians.append(middle)
            lows.append(middle - min(values) if values else 0.0)
            highs.append(max(values) - middle if values else 0.0)
        positions = range(len(keys))
        axis.bar(positions, medians, color=COLOURS[:len(keys)], yerr=[lows, highs], capsize=4)
        for position, key, middle in zip(positions, keys, medians):
            if not row.cells.get(key):
                axis.text(position, 0, "n/a", ha="center", va="bottom", fontsize=8)
        axis.set_xticks(list(positions))
        axis.set_xticklabels([_short(header) for header in table.columns.values()], rotation=30, ha="right",
                             fontsize=8)
        direction = "lower is better" if row.lower_is_better else "higher is better"
        axis.set_title(_wrap(row.label), fontsize=9)
        axis.set_ylabel(f"{row.unit} ({direction})", fontsize=8)
    figure.suptitle(table.title.replace("`", ""), fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def _short(header: str) -> str:
    return header.replace("`", "").replace("limit: ", "limit:\n").split(",")[0]


def _wrap(text: str, width: int = 40) -> str:
    words, lines, current = text.replace("`", "").split(), [], ""
    for word in words:
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}".strip()
    return "\n".join(lines + [current])


def write_plots(tables: dict[str, Table], directory: Path) -> list[Path]:
    written = []
    for name, table in tables.items():
        path = plot_table(table, directory / f"{name}.png")
        if path is not None:
            written.append(path)
    return written
