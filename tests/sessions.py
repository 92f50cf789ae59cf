"""Processes of a POSIX session, for tests that start a whole command in its own session (README blocks, the
demo) and must leave nothing behind when it fails."""
from __future__ import annotations

import os
import signal
from pathlib import Path


def session_members(session_id: int) -> list[int]:
    """Live (non-zombie) processes of session ``session_id``, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[3]) == session_id:
            members.append(int(entry.name))
    return members


def kill_session(session_id: int) -> list[int]:
    """SIGKILL whatever is left of the session; returns the pids found."""
    left = session_members(session_id)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left
