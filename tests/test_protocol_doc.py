"""Rule codes in code and tests point into docs/protocol.md, and nothing cites a document outside the repository.

A rule code is a capital letter of a family docs/protocol.md defines followed by a number (``W2``, ``R5``).
It counts as cited where it appears in a comment, a docstring or a test function's name (``test_W2_...``,
``test_g1_...``). Every cited code must have its anchor (``<a id="W2"></a>``) in docs/protocol.md, and a
file that cites one must name docs/protocol.md somewhere, so a reader knows where to look it up.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROTOCOL = ROOT / "docs" / "protocol.md"
SOURCE_DIRS = ("pyspark_ledger", "bookie_server", "tests", "bench", "tools")
TEXT_SUFFIXES = (".md", ".ipynb", ".proto", ".cfg", ".toml")
ANCHOR = re.compile(r'<a id="([A-Z][0-9]{1,2})"></a>')
TEST_NAME = re.compile(r"^test_([a-zA-Z])([0-9]{1,2})_")
# Documents that lived outside the repository while the project began. Spelled in pieces so that this
# file does not match its own patterns.
OUTSIDE = re.compile("|".join((
    "TEST" + r"[-_ ]MATRIX",
    "DESIGN" + r"\.md",
    r"\bseeds?[\s_]+0[0-9][0-9]",
    "/work" + "/shared",
)), re.IGNORECASE)


def defined_codes() -> set[str]:
    return set(ANCHOR.findall(PROTOCOL.read_text(encoding="utf-8")))


def code_pattern(codes: set[str]) -> re.Pattern:
    families = "".join(sorted({code[0] for code in codes}))
    return re.compile(rf"(?<![\w.])([{families}][0-9]{{1,2}})(?![\w])")


def python_files() -> list[Path]:
    return sorted(path for folder in SOURCE_DIRS for path in (ROOT / folder).rglob("*.py")
                  if "_pb2" not in path.name)  # generated wire code


def text_files() -> list[Path]:
    found = [path for path in ROOT.glob("*") if path.suffix in TEXT_SUFFIXES]
    for folder in SOURCE_DIRS + ("docs", "notebooks", "proto"):
        found += [path for path in (ROOT / folder).rglob("*") if path.suffix in TEXT_SUFFIXES]
    return sorted(set(found) - {PROTOCOL})


def prose_of(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python module, and of every test function's name."""
    found = [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
             if token.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((node.body[0].lineno, doc))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            match = TEST_NAME.match(node.name)
            if match:
                found.append((node.lineno, match.group(1).upper() + match.group(2)))
    return found


def citations(path: Path, pattern: re.Pattern) -> list[tuple[int, str]]:
    """(line, code) of every rule code cited in ``path``."""
    source = path.read_text(encoding="utf-8")
    if not pattern.search(source) and not re.search(r"def test_[a-zA-Z][0-9]", source):
        return []  # nothing that looks like a code anywhere: no need to tokenize (slow) and parse
    return [(line + text.count("\n", 0, match.start()), match.group(1))
            for line, text in prose_of(source) for match in pattern.finditer(text)]


def test_the_protocol_document_defines_codes_of_every_family():
    codes = defined_codes()
    families = {code[0] for code in codes}
    assert {"Q", "A", "W", "L", "C", "F", "R", "M", "B", "K", "G", "S", "I"} <= families, sorted(families)
    for code in ("W1", "W8", "R1", "R8", "L1", "L5", "C1", "C3", "F2", "F4", "B4", "G1", "S1"):
        assert code in codes, f"docs/protocol.md lost rule {code}, which code and tests cite"


def test_every_rule_code_cited_in_code_and_tests_is_defined_in_docs_protocol_md():
    codes = defined_codes()
    pattern = code_pattern(codes)
    undefined, unpointed = [], []
    for path in python_files():
        cited = citations(path, pattern)
        name = path.relative_to(ROOT)
        undefined += [f"{name}:{line}: {code}" for line, code in cited if code not in codes]
        if cited and "docs/protocol.md" not in path.read_text(encoding="utf-8"):
            unpointed.append(f"{name} (cites {', '.join(sorted({code for _, code in cited}))})")
    assert not undefined, "rule codes docs/protocol.md does not define:\n" + "\n".join(undefined)
    assert not unpointed, "files citing rule codes without naming docs/protocol.md:\n" + "\n".join(unpointed)


def test_the_protocol_document_is_consistent_with_itself():
    """Codes it mentions are its own, and its links to sections and rules land somewhere."""
    text = PROTOCOL.read_text(encoding="utf-8")
    codes = defined_codes()
    mentioned = set(code_pattern(codes).findall(text))
    assert mentioned <= codes, f"docs/protocol.md mentions undefined codes {sorted(mentioned - codes)}"
    slugs = {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
             for heading in re.findall(r"^#+ (.+)$", text, re.M)}
    broken = [link for link in re.findall(r"\]\(#([^)]+)\)", text) if link not in slugs | codes]
    assert not broken, f"links to nowhere in docs/protocol.md: {broken}"


@pytest.mark.parametrize("kind", ["python", "text"])
def test_nothing_cites_a_document_outside_the_repository(kind):
    paths = python_files() if kind == "python" else text_files()
    here = Path(__file__).resolve()
    found = []
    for path in paths:
        if path.resolve() == here:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not found, ("cite docs/protocol.md (or another file in the repository) instead of:\n"
                       + "\n".join(found))


def test_the_checks_see_what_they_should():
    """The scanner itself: comments, docstrings and test names count; code and other identifiers do not."""
    source = ('"""Module: W2 and R5."""\n'
              "B3 = ['b0']  # see F4\n"
              "def test_g1_two_writers():\n"
              "    '''L1/L2.'''\n"
              "    return 'S3 bucket W9'\n")
    pattern = code_pattern({"W2", "R5", "F4", "G1", "L1", "L2", "S1", "B3"})
    found = sorted(code for _, text in prose_of(source) for code in pattern.findall(text))
    assert found == ["F4", "G1", "L1", "L2", "R5", "W2"]
    assert OUTSIDE.search("see " + "TEST" + "-MATRIX row W2") and OUTSIDE.search("Seed " + "004, step 1")
    assert not OUTSIDE.search("placement_seed 0") and not OUTSIDE.search("seed ledgers")


def test_pointers_to_measurements_name_a_section_of_docs_measurements_md():
    """Figures measured on particular machines live in docs/measurements.md; code points at them by section."""
    headings = re.findall(r"^## (.+)$", (ROOT / "docs" / "measurements.md").read_text(encoding="utf-8"), re.M)
    sections = {heading.split(" (")[0].replace("`", "") for heading in headings}
    wrong = []
    for path in python_files():
        for match in re.finditer(r'docs/measurements\.md, "([^"]+)"', path.read_text(encoding="utf-8")):
            name = " ".join(match.group(1).split())
            if name not in sections:
                wrong.append(f"{path.relative_to(ROOT)}: {name!r}")
    assert not wrong, f"no such section in docs/measurements.md ({sorted(sections)}):\n" + "\n".join(wrong)
