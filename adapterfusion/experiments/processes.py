"""Which process a record (the runner lock, a writer's journal) names, and whether that process still runs.

A record holds the host, the pid and, where the system tells them (Linux /proc), the boot id and the pid's start
time, so a pid reused by another process after a kill or a reboot is not taken for the one recorded, and its pid
namespace: another container on this machine may share our host name and boot id, and has pids of its own that
cannot be asked from here, so such a process counts as alive. A process on another host cannot be checked from here;
callers decide what that means for them.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adapterfusion.io.atomic import pid_namespace

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
    pid_namespace: str | None = None  # None: not recorded (a record of an older version, or no Linux /proc)

    @classmethod
    def current(cls) -> ProcessRecord:
        return cls(os.getpid(), socket.gethostname(), _boot_id(), _start_time(os.getpid()), pid_namespace() or None)

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
        boot_id, start_time, namespace = data.get("boot_id"), data.get("start_time"), data.get("pid_namespace")
        return cls(
            data["pid"],
            data["host"],
            boot_id if isinstance(boot_id, str) else None,
            start_time if isinstance(start_time, int) and not isinstance(start_time, bool) else None,
            namespace if isinstance(namespace, str) and namespace else None,
        )

    def status(self) -> str:
        """ALIVE, GONE (it ended, its pid now belongs to another process, or the machine rebooted since) or
        ELSEWHERE (another host: cannot be checked from here). One of another pid namespace of this boot (another
        container) is ALIVE: its pid, asked here, would be another process's, or none."""
        if self.host != socket.gethostname():
            return ELSEWHERE
        boot_id = _boot_id()
        if self.boot_id is not None and boot_id is not None and boot_id != self.boot_id:
            return GONE
        if self.elsewhere_on_this_machine():
            return ALIVE
        if not _pid_exists(self.pid):
            return GONE
        start_time = _start_time(self.pid)
        if self.start_time is not None and start_time is not None and start_time != self.start_time:
            return GONE
        return ALIVE

    def elsewhere_on_this_machine(self) -> bool:
        """Whether the record names a pid namespace (another container's) that is not this process's."""
        here = pid_namespace()
        return self.pid_namespace is not None and here != "" and self.pid_namespace != here

    def __str__(self) -> str:
        if self.elsewhere_on_this_machine():
            return f"pid {self.pid} on {self.host} (in another container: pid namespace {self.pid_namespace})"
        return f"pid {self.pid} on {self.host}"
