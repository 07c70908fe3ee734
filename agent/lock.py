"""One campaign per folder: an advisory lock file held for the campaign's whole life.

Why flock and not "does the lock file exist": the kernel drops an flock when its holder dies,
however it dies, so a campaign killed with SIGKILL never leaves a stale lock behind that a
person would have to delete by hand. The file's content (pid, host, start time) is only there
to tell the second campaign who holds the folder.

The descriptor is opened close-on-exec, so sandbox workers and Ray processes started by the
campaign never inherit (and so never keep alive) the lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

LOCK_FILE = "campaign.lock"


class CampaignLocked(RuntimeError):
    """Another live campaign holds the folder."""


class CampaignLock:
    """`with CampaignLock(dir):` holds `dir/campaign.lock` or raises CampaignLocked at once."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise CampaignLocked(describe_holder(self.folder, holder)) from None
        os.ftruncate(fd, 0)
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        os.pwrite(fd, json.dumps(info).encode(), 0)
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        """Empty the file and drop the lock (the file stays: removing it would race a newcomer)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> "CampaignLock":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 4096, 0)
        info = json.loads(data.decode() or "{}")
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def describe_holder(folder: Path, holder: dict[str, Any]) -> str:
    pid = holder.get("pid", "?")
    host = holder.get("host")
    since = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) else "an unknown time"
    where = f" on {host}" if host else ""
    return (f"{folder} is in use by campaign pid {pid}{where} since {when}; "
            f"stop it or choose another -o")
