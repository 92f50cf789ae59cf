"""Real bookie processes for tests, benchmarks and a local sandbox.

``BookieProcess`` runs ``python -m bookie_server`` on 127.0.0.1: ``start()``
waits (bounded) for its ready line, ``stop()`` sends SIGTERM and waits,
``kill()`` sends SIGKILL and waits, ``restart()`` does stop + start on the same
port and data dir. stdout and stderr go to files in the data dir
(``bookie-stdout.log`` / ``bookie-stderr.log``, appended across restarts) so a
failing test can show why. ``BookieCluster`` starts n of them and reaps them
all on exit. Every process started here is waited for; none is left behind.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import bookie_server
from pyspark_ledger.errors import BookieProcessError, InvalidArgumentError
from pyspark_ledger.testing.ports import free_port  # noqa: F401 - re-exported: tests and benchmarks use it here

HOST = "127.0.0.1"
STDOUT_LOG = "bookie-stdout.log"
STDERR_LOG = "bookie-stderr.log"
READY_MARK = " ready "
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
_POLL_S = 0.02
_REPO_ROOT = Path(bookie_server.__file__).resolve().parent.parent


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a bookie child process: this checkout importable, unbuffered output."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_bookie_server(args: Sequence[str], timeout: float = START_TIMEOUT_S,
                      env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m bookie_server ARGS`` to completion (e.g. a start that must fail); output captured."""
    return subprocess.run([sys.executable, "-m", "bookie_server", *args], capture_output=True, text=True,
                          timeout=timeout, env=child_env(env), cwd=str(_REPO_ROOT), stdin=subprocess.DEVNULL)


def _flag_args(flags: Mapping[str, Any]) -> list[str]:
    """``max_entry_size=10`` -> ``--max-entry-size 10``; True -> bare flag; False/None -> omitted; a list or
    tuple -> the flag once per item."""
    args: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        if isinstance(value, (list, tuple)):  # a repeatable flag: admin_identity=["a", "b"]
            for item in value:
                args += ["--" + name.replace("_", "-"), str(item)]
            continue
        args.append("--" + name.replace("_", "-"))
        if value is not True:
            args.append(str(value))
    return args


STOP_WAIT_S = 5.0


def wait_stopped(pid: int, timeout_s: float = STOP_WAIT_S) -> bool:
    """Wait until every thread of ``pid`` is stopped (state T in /proc, as after SIGSTOP); True once it is, or
    once the process is gone (nothing of it runs), False if some thread still ran after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            states = []
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/stat") as handle:
                    states.append(handle.read().rsplit(")", 1)[1].split()[0])
        except (FileNotFoundError, ProcessLookupError):
            return True
        except IndexError:
            states = [""]
        if all(state in ("T", "t", "Z", "X") for state in states):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)


class BookieProcess:
    """One bookie server process (see the module docstring)."""

    def __init__(self, data_dir: str | os.PathLike, metadata_uri: str, port: int | None = None, *,
                 env: Mapping[str, str] | None = None, **flags: Any) -> None:
        self.data_dir = Path(data_dir)
        self.metadata_uri = metadata_uri
        self.port = port or free_port()
        self.env = dict(env or {})
        self.flags = dict(flags)
        self.bookie_id = self.flags.get("bookie_id") or f"{HOST}:{self.port}"
        self.address = f"{HOST}:{self.port}"
        self.metrics_url: str | None = None
        self.add_port: int | None = None  # the running process's framed add port (docs/protocol.md W11), if any
        self.process: subprocess.Popen | None = None
        self._terminated = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def returncode(self) -> int | None:
        return self.process.poll() if self.process else None

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def args(self) -> list[str]:
        """The bookie-server flags of this process."""
        args = ["--data-dir", str(self.data_dir), "--port", str(self.port), "--metadata", self.metadata_uri,
                "--host", HOST]
        return args + _flag_args({"metrics_port": 0, **self.flags})

    def run_to_exit(self, timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess:
        """Run this bookie in the foreground until it exits (for starts that must fail)."""
        return run_bookie_server(self.args(), timeout, self.env)

    # --- lifecycle -----------------------------------------------------------------
    def spawn(self, env: Mapping[str, str] | None = None) -> subprocess.Popen:
        """Start the process without waiting for it to be ready."""
        if self.is_running():
            raise BookieProcessError(f"bookie {self.bookie_id} is already running (pid {self.pid})",
                                     bookie_id=self.bookie_id)
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # as the bookie makes it (owner only)
        command = [sys.executable, "-m", "bookie_server", *self.args()]
        self._stdout_offset = self._log_size(STDOUT_LOG)
        with open(self.data_dir / STDOUT_LOG, "ab") as out, open(self.data_dir / STDERR_LOG, "ab") as err:
            self.process = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                            env=child_env({**self.env, **(env or {})}), cwd=str(_REPO_ROOT))
        self.metrics_url = None
        self._terminated = False
        return self.process

    def start(self, timeout: float = START_TIMEOUT_S, env: Mapping[str, str] | None = None) -> "BookieProcess":
        """Spawn and wait for the ready line; BookieProcessError (with stderr's tail) if it exits or times out."""
        self.spawn(env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self._ready_line()
            if line is not None:
                self._parse_ready(line)
                return self
            if self.process.poll() is not None:
                raise BookieProcessError(f"bookie {self.bookie_id} exited with status {self.process.returncode} "
                                         f"before it was ready: {self.stderr_tail()}", bookie_id=self.bookie_id)
            time.sleep(_POLL_S)
        self.kill()
        raise BookieProcessError(f"bookie {self.bookie_id} was not ready within {timeout:.0f} s: "
                                 f"{self.stderr_tail()}", bookie_id=self.bookie_id)

    def terminate(self) -> None:
        """Send SIGTERM (once per run) without waiting."""
        if self.is_running() and not self._terminated:
            self._terminated = True
            self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit status."""
        self.terminate()
        return self._signal_and_wait(None, timeout)

    def kill(self) -> int | None:
        """SIGKILL (kill -9) and wait."""
        return self._signal_and_wait(signal.SIGKILL, STOP_TIMEOUT_S)

    def pause(self) -> None:
        """SIGSTOP: the process stays, answers nothing and renews nothing until ``resume()`` (or a kill).
        Returns once every thread of it has stopped."""
        self._signal_running(signal.SIGSTOP)
        if self.process is not None and not wait_stopped(self.process.pid):
            raise BookieProcessError(f"bookie {self.bookie_id} (pid {self.pid}) did not stop within "
                                     f"{STOP_WAIT_S:g} s of SIGSTOP", bookie_id=self.bookie_id)

    def resume(self) -> None:
        """SIGCONT after ``pause()``; nothing if the process is gone."""
        self._signal_running(signal.SIGCONT)

    def _signal_running(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                self.process.send_signal(signum)
            except ProcessLookupError:
                pass

    def wait_exit(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """Wait for a process that is exiting on its own (e.g. a crash point); kills it after timeout."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise BookieProcessError(f"bookie {self.bookie_id} did not exit within {timeout:.0f} s",
                                     bookie_id=self.bookie_id) from None

    def restart(self, timeout: float = START_TIMEOUT_S, env: Mapping[str, str] | None = None) -> "BookieProcess":
        if self.is_running():
            self.stop()
        return self.start(timeout, env)

    def _signal_and_wait(self, signum: int | None, timeout: float) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            if signum is not None:
                self.process.send_signal(signum)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._dump_stacks()
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def _dump_stacks(self) -> None:
        """Ask a hung bookie to write every thread's stack to its stderr log (SIGUSR1, faulthandler)."""
        self.process.send_signal(signal.SIGUSR1)
        time.sleep(0.5)  # give faulthandler a moment before the SIGKILL; diagnostics only

    def __enter__(self) -> "BookieProcess":
        return self.start() if not self.is_running() else self

    def __exit__(self, *exc: object) -> None:
        self.kill() if exc and exc[0] is not None else self.stop()

    # --- output --------------------------------------------------------------------
    def _log_size(self, name: str) -> int:
        try:
            return (self.data_dir / name).stat().st_size
        except FileNotFoundError:
            return 0

    def _ready_line(self) -> str | None:
        try:
            with open(self.data_dir / STDOUT_LOG, "rb") as handle:
                handle.seek(self._stdout_offset)
                text = handle.read().decode(errors="replace")
        except FileNotFoundError:
            return None
        for line in text.splitlines(keepends=True):
            if READY_MARK in line and line.endswith("\n"):
                return line.strip()
        return None

    def _parse_ready(self, line: str) -> None:
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        metrics = fields.get("metrics", "off")
        self.metrics_url = None if metrics == "off" else metrics
        add_port = fields.get("add_port", "off")
        self.add_port = int(add_port) if add_port.isdigit() else None

    def stderr_tail(self, lines: int = 15) -> str:
        """The last lines the bookie wrote to stderr (for error messages)."""
        try:
            text = (self.data_dir / STDERR_LOG).read_text(errors="replace")
        except FileNotFoundError:
            return "(no stderr)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty stderr)"


class BookieCluster:
    """``n`` bookie processes sharing one metadata store; a context manager that reaps them all.

    ``zones`` (and ``racks``), if given, hold one name per bookie: bookie i starts with ``--zone zones[i]``
    (``--rack racks[i]``); ``in_zone(name)`` lists the bookies of a zone."""

    def __init__(self, n: int, base_dir: str | os.PathLike, metadata_uri: str, *,
                 zones: Sequence[str] | None = None, racks: Sequence[str] | None = None, **flags: Any) -> None:
        self.base_dir = Path(base_dir)
        self.metadata_uri = metadata_uri
        for name, names in (("zones", zones), ("racks", racks)):
            if names is not None and len(names) != n:
                raise InvalidArgumentError(f"{name} must name one per bookie ({n}), got {len(names)}")
        self.bookies = [BookieProcess(self.base_dir / f"bookie-{index}", metadata_uri,
                                      **{**flags, "zone": zones[index] if zones else flags.get("zone"),
                                         "rack": racks[index] if racks else flags.get("rack")})
                        for index in range(n)]

    def in_zone(self, zone: str) -> list[BookieProcess]:
        """The bookies started with ``--zone zone``."""
        return [bookie for bookie in self.bookies if bookie.flags.get("zone") == zone]

    def start(self) -> "BookieCluster":
        try:
            for bookie in self.bookies:
                bookie.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every bookie: SIGTERM to all at once, then wait for each (SIGKILL for stragglers)."""
        for bookie in self.bookies:
            bookie.terminate()
        for bookie in self.bookies:
            bookie.stop()

    def __iter__(self):
        return iter(self.bookies)

    def __getitem__(self, index: int) -> BookieProcess:
        return self.bookies[index]

    def __len__(self) -> int:
        return len(self.bookies)

    def __enter__(self) -> "BookieCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
