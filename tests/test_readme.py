"""The README runs as written: every ```bash and ```python block, in order, from a directory outside the checkout.

How each block is run (and what differs from a user typing it):

- **bash blocks** run line by line in ``bash -euo pipefail``, lines between two
  foreground commands in one shell (so ``export`` reaches the lines after it).
  A ``ledger sandbox ...`` line runs in the foreground for a user (Ctrl-C
  stops it): here it runs in the background, the test waits for it to print
  ``Press Ctrl-C to stop.``, and stops it with SIGINT (as Ctrl-C does) at the
  end of the test. Every line a block marks ``# ... the sandbox prints this
  line`` must appear, as written, in what the sandbox printed.
- **python blocks** run in a fresh interpreter (``sys.executable``); a block
  may use names it does not define only if ``GIVEN`` provides them (see there).
- **Paths**: every ``/tmp/`` in a block becomes this run's own temporary
  directory, so two runs (or a user's own tour) never share a data dir or a
  checkpoint. Nothing else is substituted.
- **The code under test** is this checkout's: the work directory is a
  temporary one outside it, and ``PYTHONPATH`` names the checkout, so the
  ``ledger`` command and ``python`` import it (not another installed copy).
  ``LEDGER_*`` variables of the caller's environment are removed.
- **Lines changed or skipped** are listed in ``CHANGED_LINES`` with the reason;
  keep that list short.

Every process a block starts runs in a session of its own and is killed at
the end of the block (background sandboxes: at the end of the test), also
when the test fails; a foreground command that leaves a process behind fails
the test.
"""
from __future__ import annotations

import ast
import builtins
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pyspark_ledger.testing.spark import spark_unavailable_reason
from tests.sessions import kill_session

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DEMO_SECONDS = 5
COMMAND_TIMEOUT_S = 420
SANDBOX_READY_TIMEOUT_S = 120
SANDBOX_STOP_TIMEOUT_S = 60
SANDBOX_READY = "Press Ctrl-C to stop."
PRINTED_MARK = "the sandbox prints this line"

#: README line -> (what runs instead, or None to skip it; why). Keep this list short: each entry is a
#: place where the README is not run exactly as written.
CHANGED_LINES: dict[str, tuple[str | None, str]] = {
    "pip install -e '.[spark,test]' && ledger demo": (
        f"ledger demo --duration {DEMO_SECONDS}",
        "the install is the environment this suite already runs in (reinstalling takes about a minute and "
        "would change the environment under the run); the demo streams 60 s by default, "
        f"{DEMO_SECONDS} s are enough to kill a bookie and check every event"),
    "python3 -m pytest -q": (None, "this test is part of that run: running it here would recurse"),
}

#: Names a python block may use without defining them, and what it is given for each.
GIVEN = {
    "spark": "a local SparkSession (pyspark_ledger.testing.spark.local_spark_session), stopped after the block",
    "df": "a DataFrame of 100 rows: id bigint, body string ('event <id>')",
    "uri": "the metadataServiceUri printed by the sandbox the README started last (the tour's)",
}

SPARK_PRELUDE = """\
from pyspark_ledger.testing.spark import local_spark_session, stop_spark_session
spark = local_spark_session("readme")
df = spark.range(100).selectExpr("id", "concat('event ', id) AS body")
"""

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


@dataclass
class Block:
    language: str
    code: str
    line: int  # the README line of the block's first code line

    def mentions(self, text: str) -> bool:
        return text in self.code


@dataclass
class Run:
    """What the blocks run so far share: the work dir, the environment, the sandboxes still running."""

    tmp: Path
    work: Path
    env: dict[str, str]
    sandboxes: list[tuple[subprocess.Popen, Path]] = field(default_factory=list)
    uri: str | None = None
    outputs: list[str] = field(default_factory=list)


def readme_blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text`` with a language, in order."""
    blocks, language, start, lines = [], None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        if language is None and line.startswith("```"):
            language, start, lines = line[3:].strip(), number + 1, []
        elif language is not None and line.strip() == "```":
            if language:
                blocks.append(Block(language, "\n".join(lines) + "\n", start))
            language = None
        elif language is not None:
            lines.append(line)
    assert language is None, "README.md: a fenced block is not closed"
    return blocks


def free_names(code: str) -> set[str]:
    """Names ``code`` reads but never binds (nor are builtins)."""
    tree = ast.parse(code)
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound - set(dir(builtins))


# --- processes ------------------------------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def _terminated_with_pytest() -> None:
    """In the child, before exec (kept across it): SIGTERM once pytest is gone, even when pytest was killed
    with kill -9 and ran no teardown. Not SIGINT: a shell's background job ignores it, and so would the
    child. A sandbox's bookies then exit with it (``--exit-with-parent``)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _start(command: list[str], run: Run, output: Path) -> subprocess.Popen:
    with open(output, "wb") as sink:
        return subprocess.Popen(command, cwd=run.work, env=run.env, stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_terminated_with_pytest)


def run_foreground(command: list[str], run: Run, what: str) -> str:
    """Run ``command`` to its end; fail with its output unless it exits 0 and leaves no process behind."""
    output = run.tmp / f"out-{len(run.outputs)}.txt"
    process = _start(command, run, output)
    try:
        status = process.wait(timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        status = None
    finally:
        left = kill_session(process.pid)
        process.wait()
    text = output.read_text(errors="replace")
    run.outputs.append(text)
    assert status is not None, f"{what} did not finish in {COMMAND_TIMEOUT_S} s; its output:\n{text}"
    assert status == 0, f"{what} exited {status}; its output:\n{text}"
    assert not left, f"{what} left processes {left} behind (killed); its output:\n{text}"
    return text


def start_sandbox(line: str, run: Run) -> str:
    """Start a foreground ``ledger sandbox`` line in the background; its output once it is ready."""
    output = run.tmp / f"sandbox-{len(run.sandboxes)}.txt"
    process = _start(["bash", "-c", line], run, output)
    run.sandboxes.append((process, output))
    deadline = time.monotonic() + SANDBOX_READY_TIMEOUT_S
    while SANDBOX_READY not in output.read_text(errors="replace"):
        assert process.poll() is None, f"`{line}` exited {process.returncode}:\n{output.read_text()}"
        assert time.monotonic() < deadline, f"`{line}` not ready in {SANDBOX_READY_TIMEOUT_S} s:\n{output.read_text()}"
        time.sleep(0.2)
    text = output.read_text(errors="replace")
    found = re.search(r"metadataServiceUri = (\S+)", text)
    assert found, f"`{line}` printed no metadataServiceUri:\n{text}"
    run.uri = found.group(1)
    return text


def stop_sandboxes(run: Run) -> None:
    """Ctrl-C every sandbox (SIGINT to its process group), then kill whatever is left of it."""
    for process, _output in run.sandboxes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
    deadline = time.monotonic() + SANDBOX_STOP_TIMEOUT_S
    for process, _output in run.sandboxes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        kill_session(process.pid)
        process.wait()


# --- blocks ---------------------------------------------------------------------------------------------------
def localize(text: str, run: Run) -> str:
    return text.replace("/tmp/", f"{run.tmp}/")


def command_of(line: str) -> str:
    """A shell line without its trailing comment (the README's comments follow two spaces and a '#')."""
    return re.split(r"\s+#\s", line, maxsplit=1)[0].strip()


def run_bash_block(block: Block, run: Run) -> None:
    pending: list[str] = []
    printed: list[str] = []

    def flush():
        if pending:
            script = "\n".join(["set -euo pipefail", *pending])
            run_foreground(["bash", "-c", script], run, f"README.md line {block.line}+: {pending}")
            pending.clear()

    for line in block.code.splitlines():
        command = command_of(line)
        if command in CHANGED_LINES:
            command = CHANGED_LINES[command][0]
            if command is None:
                continue
        if not command or command.startswith("#"):
            continue
        command = localize(command, run)
        if command.startswith("ledger sandbox"):
            flush()
            printed.append(start_sandbox(command, run))
            continue
        if PRINTED_MARK in line:
            assert printed, f"README.md: `{line}` says the sandbox prints it, but no sandbox ran before it"
            shown = [shown_line.strip() for shown_line in printed[-1].splitlines()]
            assert command in shown, (f"README.md says the sandbox prints `{command}`, but it printed:\n"
                                      f"{printed[-1]}")
        pending.append(command)
    flush()


def run_python_block(block: Block, run: Run) -> str:
    missing = free_names(block.code) - set(GIVEN)
    assert not missing, f"README.md line {block.line}: the python block uses {missing}, which nothing defines"
    names = free_names(block.code)
    source = run.tmp / f"block-{block.line}.py"
    source.write_text(localize(block.code, run))
    prelude = "import os\n"
    if "uri" in names:
        assert run.uri, f"README.md line {block.line} uses `uri`, but no sandbox ran before it"
        prelude += f"uri = {run.uri!r}\n"
    uses_spark = bool(names & {"spark", "df"})
    if uses_spark:
        prelude += SPARK_PRELUDE
    # The block is compiled under README.md's name and line numbers, so a traceback points into the README.
    body = (f"code = compile('\\n' * {block.line - 1} + open({str(source)!r}).read(), 'README.md', 'exec')\n"
            "exec(code, globals())\n")
    if uses_spark:  # the error is printed before Spark stops: its text needs the JVM
        body = "try:\n" + "".join(f"    {line}\n" for line in body.splitlines()) + \
               "except BaseException:\n    import traceback\n    traceback.print_exc()\n    raise SystemExit(1)\n" + \
               "finally:\n    stop_spark_session(spark)\n"
    runner = run.tmp / f"run-block-{block.line}.py"
    runner.write_text(prelude + body)
    return run_foreground([sys.executable, str(runner)], run, f"the python block at README.md line {block.line}")


# --- what the README promises beyond "it runs" ---------------------------------------------------------------
def check_ensemble_change(output: str) -> None:
    """The Python tour: the entry written after the kill is read back, and the ledger has a second fragment."""
    assert "b'after the failure'" in output, output
    fragments = re.findall(r"^(\d+) \[", output, re.MULTILINE)
    assert fragments == ["0", "100"], f"expected an ensemble change at entry 100, got fragments {fragments}:\n{output}"


def check_secure_sandbox(run: Run) -> None:
    """The security section: the sandbox prints export lines that let a second shell reach it over mutual TLS."""
    printed = run.sandboxes[-1][1].read_text()
    exports = [line.strip() for line in printed.splitlines() if line.strip().startswith("export ")]
    names = {line.split("=", 1)[0].split()[1] for line in exports}
    assert {"LEDGER_METADATA", "LEDGER_TLS_CA", "LEDGER_TLS_CERT", "LEDGER_TLS_KEY"} <= names, printed
    shown = run_foreground(["bash", "-c", "\n".join(["set -euo pipefail", *exports, "ledger bookies"])], run,
                           "`ledger bookies` with the secure sandbox's export lines")
    assert shown.count("mtls") == 3, shown


# --- tests ----------------------------------------------------------------------------------------------------
def test_every_changed_line_is_in_the_readme():
    """CHANGED_LINES names only lines the README has (a stale entry would hide nothing, but mislead)."""
    commands = {command_of(line) for block in readme_blocks(README.read_text()) if block.language == "bash"
                for line in block.code.splitlines()}
    assert set(CHANGED_LINES) <= commands, set(CHANGED_LINES) - commands


def test_blocks_are_bash_or_python_and_use_only_given_names():
    blocks = readme_blocks(README.read_text())
    assert blocks, "README.md has no code blocks"
    for block in blocks:
        assert block.language in ("bash", "python"), f"README.md line {block.line}: no runner for {block.language!r}"
        if block.language == "python":
            assert free_names(block.code) <= set(GIVEN), (block.line, free_names(block.code) - set(GIVEN))


@pytest.mark.spark
def test_readme_runs_as_written():
    reason = spark_unavailable_reason()
    if reason:
        pytest.skip(f"the README's demo and Spark blocks need Spark: {reason}")
    tmp = Path(tempfile.mkdtemp(prefix="readme-"))  # short: the sandbox's paths end up in URIs and sockets
    env = {key: value for key, value in os.environ.items() if not key.startswith("LEDGER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    run = Run(tmp=tmp, work=tmp / "work", env=env)
    run.work.mkdir()
    try:
        for block in readme_blocks(README.read_text()):
            if block.language == "bash":
                run_bash_block(block, run)
                if "--tls" in block.code:
                    check_secure_sandbox(run)
            else:
                output = run_python_block(block, run)
                if "kill_bookie" in block.code:
                    check_ensemble_change(output)
    finally:
        stop_sandboxes(run)
        shutil.rmtree(tmp, ignore_errors=True)
