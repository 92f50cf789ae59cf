"""Processes started on a host of the test cluster: ``ip netns exec NS COMMAND`` in a session of their own.

``HostProcess.start()`` launches the command inside the host's namespace with
its output in a log file; ``ip netns exec`` execs the command, so ``pid`` is
the command's own pid, and as the leader of a new session and process group
(``pgid == pid``) everything it forks (a Spark worker's executors and their
Python workers) can be signalled at once. ``pause``/``resume`` (SIGSTOP /
SIGCONT) and ``kill`` (SIGKILL) act on the whole group, ``stop`` sends SIGTERM
and SIGKILLs what is left after a grace period; all of them wait, so no zombie
is left. ``wait_for_line`` waits (bounded) for a line in the log.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from pyspark_ledger.errors import ClusterError

POLL_S = 0.2
STOP_GRACE_S = 5.0


class HostProcess:
    """One process on one host (see the module docstring)."""

    def __init__(self, name: str, netns: str, command: Sequence[str], log_path: Path, *,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None,
                 info: Mapping[str, object] | None = None) -> None:
        self.name = name
        self.info = dict(info or {})   # what the cluster file says of it besides pid and log (a bookie's id)
        self.netns = netns
        self.command = list(command)
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.process: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> "HostProcess":
        if self.running():
            raise ClusterError(f"{self.name} is running already (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(["ip", "netns", "exec", self.netns, *self.command], stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                                            cwd=self.cwd, start_new_session=True)
        return self

    def wait_for_line(self, marker: str | Callable[[str], bool], timeout_s: float) -> str:
        """The first log line (since start) containing ``marker`` (or for which it is true); ClusterError with
        the log's tail if the process exits or ``timeout_s`` passes first."""
        test = marker if callable(marker) else (lambda line: marker in line)
        deadline = time.monotonic() + timeout_s
        while True:
            for line in self._new_lines():
                if test(line):
                    return line
            if not self.running():
                raise ClusterError(f"{self.name} in {self.netns} exited with status {self.returncode()} before it "
                                   f"was ready; its log {self.log_path} ends with:\n{self.log_tail()}")
            if time.monotonic() >= deadline:
                raise ClusterError(f"{self.name} in {self.netns} was not ready within {timeout_s:.0f} s; its log "
                                   f"{self.log_path} ends with:\n{self.log_tail()}")
            time.sleep(POLL_S)

    def _new_lines(self) -> list[str]:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(self._log_offset)
                return handle.read().decode(errors="replace").splitlines()
        except FileNotFoundError:
            return []

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self._new_lines()[-lines:]) or "(empty)"

    def returncode(self) -> int | None:
        return self.process.poll() if self.process else None

    # --- signals, for tests and fault injection -----------------------------------------------------
    def signal_group(self, signum: int) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                pass

    def pause(self) -> None:
        self.signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal_group(signal.SIGCONT)

    def kill(self) -> int | None:
        """SIGKILL the process group and wait for the leader."""
        self.signal_group(signal.SIGKILL)
        return self._wait(STOP_GRACE_S * 4)

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM the process group (after SIGCONT, in case it is paused); SIGKILL after ``grace_s``."""
        if self.process is None:
            return None
        self.signal_group(signal.SIGCONT)
        self.signal_group(signal.SIGTERM)
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
        return self.kill()

    def _wait(self, timeout_s: float) -> int | None:
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"{self.name} (pid {self.pid}) did not exit after SIGKILL") from None

    def to_dict(self) -> dict:
        return {**self.info, "pid": self.pid, "pgid": self.pid, "log": str(self.log_path), "command": self.command}

    def __repr__(self) -> str:
        return f"HostProcess({self.name} in {self.netns}, pid={self.pid}, running={self.running()})"
