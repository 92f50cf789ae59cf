"""A benchmark table as data, and how a session's results (``bench/results/latest.json``) fill it.

A ``Spec`` names a table's columns, its ratio columns and its rows (``Figure``: a label, a unit and, per
column, where in the benchmarks' JSON documents its values are: ``At``); ``build`` turns it into a ``Table``
of ``Row``s for one session, whose notes end with why a benchmark has no figures (not run, skipped,
failed). The specs of every benchmark are in ``report.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Row:
    label: str
    unit: str
    cells: dict[str, list[float]]
    lower_is_better: bool = False


@dataclass
class Table:
    name: str
    title: str
    columns: dict[str, str]  # key -> header
    ratios: list[tuple[str, str, str]]  # (numerator key, denominator key, header)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: tuple[str, ...] = ()  # the benchmarks whose runs fill it


# --- reading the results --------------------------------------------------------------------------------
def documents(session: dict, name: str) -> list[dict]:
    """The JSON documents benchmark ``name`` wrote in this session (failed and skipped runs left out)."""
    return [record["result"] for record in session.get("benchmarks", {}).get(name, [])
            if "result" in record and "skipped" not in record["result"]]


def dig(document, path: str):
    """``document``'s value at a dotted ``path`` ("runs.1KiB.p50_ms"), or None."""
    for key in path.split("."):
        if not isinstance(document, dict) or key not in document:
            return None
        document = document[key]
    return document


def gather(docs: list[dict], path: str, field_name: str | None = None) -> list[float]:
    """Every value at ``path`` over ``docs``: a number, or a list of numbers, or of dicts (then their
    ``field_name``)."""
    values: list[float] = []
    for document in docs:
        found = dig(document, path)
        items = found if isinstance(found, list) else [found]
        for item in items:
            if field_name is not None and isinstance(item, dict):
                item = item.get(field_name)
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                values.append(float(item))
    return values


def problems(session: dict, name: str) -> list[str]:
    """Why benchmark ``name`` has no figures in this session, if it has none."""
    records = session.get("benchmarks", {}).get(name)
    if records is None:
        return [f"`{name}` was not run in this session."]
    reasons = []
    for record in records:
        if "skipped" in record:
            reasons.append(f"`{name}` skipped: {record['skipped']}")
        elif "error" in record:
            last = (record["error"].strip().splitlines() or [""])[-1]
            reasons.append(f"`{name}` failed: {last}")
    return sorted(set(reasons))


# --- a table as data -----------------------------------------------------------------------------------
Docs = dict[str, list[dict]]  # benchmark name -> its documents in this session
Text = str | Callable[[Docs], str]  # a header, label or note: fixed, or made from the documents


@dataclass(frozen=True)
class At:
    """Where a cell's values are: ``read(documents, path, field)`` over the documents of benchmark
    ``source`` (default: the table's first), each times ``scale``; with ``first``, only the first value."""

    path: str
    field: str | None = None
    source: str | None = None
    scale: float = 1.0
    first: bool = False
    read: Callable[[list[dict], str, str | None], list[float]] = gather

    def values(self, docs: Docs, default_source: str) -> list[float]:
        found = self.read(docs[self.source or default_source], self.path, self.field)
        found = [value * self.scale for value in found]
        return found[:1] if self.first else found


@dataclass(frozen=True)
class Figure:
    """One row: its label, unit and where each column's values are (a column it does not name stays empty)."""

    label: Text
    unit: str
    cells: dict[str, At]
    lower_is_better: bool = False


@dataclass(frozen=True)
class Spec:
    """One table: what ``build`` needs to fill it from a session's results."""

    name: str
    title: str
    columns: dict[str, Text]  # key -> header
    ratios: tuple[tuple[str, str, str], ...]  # (numerator key, denominator key, header)
    figures: tuple[Figure, ...]
    notes: tuple[Text, ...] = ()  # one made from the documents is left out when empty
    sources: tuple[str, ...] = ()  # the benchmarks whose documents fill it (default: ``name``)


def build(session: dict, spec: Spec) -> Table:
    """``spec``'s table from ``session``: its rows, its notes, then why each source has no figures, if so."""
    sources = spec.sources or (spec.name,)
    docs = {source: documents(session, source) for source in sources}

    def text(value: Text) -> str:
        return value(docs) if callable(value) else value
    table = Table(spec.name, spec.title, {key: text(header) for key, header in spec.columns.items()},
                  list(spec.ratios), sources=sources)
    for figure in spec.figures:
        cells = {key: figure.cells[key].values(docs, sources[0]) if key in figure.cells else []
                 for key in table.columns}
        table.rows.append(Row(text(figure.label), figure.unit, cells, figure.lower_is_better))
    table.notes += [note for note in map(text, spec.notes) if note]
    for source in sources:
        table.notes += problems(session, source)
    return table
