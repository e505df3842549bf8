"""Which process a record (the runner lock, a writer's journal) names, and whether that process still runs.

A record holds the host, the pid and, where the system tells them (Linux /proc), the boot id and the pid's start
time, so a pid reused by another process after a kill or a reboot is not taken for the one recorded. A process on
another host cannot be checked from here; callers decide what that means for them.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ALIVE, GONE, ELSEWHERE = "alive", "gone", "elsewhere"
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _boot_id() -> str | None:
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on, None where unknown (no /proc, or no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        return stat[stat.rindex(")") + 2 :].split()  # after "(comm)", which may hold spaces
    except (OSError, ValueError):
        return None


def _start_time(pid: int) -> int | None:
    """The pid's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), None where unknown."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields else None
    except (ValueError, IndexError):
        return None


def _pid_exists(pid: int) -> bool:
    """A process with this pid runs; a zombie (ended, not yet reaped by its parent) does not count."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        pass
    except OSError:
        return False
    fields = _stat_fields(pid)
    return not fields or fields[0] not in ("Z", "X")


@dataclass(frozen=True)
class ProcessRecord:
    """One process, as recorded by itself: `ProcessRecord.current()`."""

    pid: int
    host: str
    boot_id: str | None = None
    start_time: int | None = None

    @classmethod
    def current(cls) -> ProcessRecord:
        return cls(os.getpid(), socket.gethostname(), _boot_id(), _start_time(os.getpid()))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> ProcessRecord | None:
        """The record in `data` (a lock's or journal's JSON), None if it names no process."""
        if (
            not isinstance(data, dict)
            or isinstance(data.get("pid"), bool)
            or not isinstance(data.get("pid"), int)
            or not isinstance(data.get("host"), str)
        ):
            return None
        boot_id, start_time = data.get("boot_id"), data.get("start_time")
        return cls(
            data["pid"],
            data["host"],
            boot_id if isinstance(boot_id, str) else None,
            start_time if isinstance(start_time, int) and not isinstance(start_time, bool) else None,
        )

    def status(self) -> str:
        """ALIVE, GONE (it ended, its pid now belongs to another process, or the machine rebooted since) or
        ELSEWHERE (another host: cannot be checked from here)."""
        if self.host != socket.gethostname():
            return ELSEWHERE
        boot_id = _boot_id()
        if self.boot_id is not None and boot_id is not None and boot_id != self.boot_id:
            return GONE
        if not _pid_exists(self.pid):
            return GONE
        start_time = _start_time(self.pid)
        if self.start_time is not None and start_time is not None and start_time != self.start_time:
            return GONE
        return ALIVE

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}"
