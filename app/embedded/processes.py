"""What the embedded servers' owners need to know about processes and files: whether a pid
is a live process (a zombie is not: where PID 1 does not reap, a killed server lingers as
one), an exclusive lock on a file shared by every process, and small JSON files written whole.
psutil (a dependency of the `embedded` extra) is imported where it is used: a deployment
without embedded servers imports this package without it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def alive(pid: int | None) -> bool:
    """A process with this pid runs (a zombie has exited: it only waits to be reaped)."""
    if not pid:
        return False
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def started_at(pid: int) -> float | None:
    """The process's creation time (to tell it from a later process given the same pid)."""
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on `path`, held until the block ends. The kernel drops it when the
    process dies, so a killed holder never leaves it taken. Each call opens the file anew:
    two threads of one process exclude each other too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def write_json(path: Path, value: Any) -> None:
    """Written to a temporary file, then renamed over: a reader never sees half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value))
    tmp.replace(path)
