"""`htm` as a user runs it: real processes on a data directory of their own (embedded
PostgreSQL and Redis, never the suite's shared servers under .htm/test/)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from app.config import PROJECT_ROOT
from app.embedded import free_port


def htm_env(data_dir: Path, **settings: str) -> dict[str, str]:
    """This environment without any HTM_* setting, then the data directory and `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HTM_")}
    env.update(HTM_DATA_DIR=str(data_dir), HTM_EMBEDDING_PROVIDER="none", HTM_LOG_FORMAT="text")
    env.update({f"HTM_{k.upper()}": v for k, v in settings.items()})
    return env


def htm(
    data_dir: Path, *args: str, stdin: str | None = None, timeout: float = 180, **settings: str
) -> subprocess.CompletedProcess[str]:
    """Run `htm *args` to its end: exit status, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=PROJECT_ROOT,
        env=htm_env(data_dir, **settings),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass
class Served:
    """`htm serve` on its own port, its log in the data directory."""

    data_dir: Path
    settings: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)  # after `htm serve`
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "serve.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start(self, limit_s: float = 120) -> Served:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # stderr to a file, not a pipe: the service logs a line per request, more than a
        # pipe nobody reads holds before the server blocks on it.
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "serve", *self.args],
                cwd=PROJECT_ROOT,
                env=htm_env(self.data_dir, port=str(self.port), **self.settings),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log()
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"htm serve did not become ready:\n{self.log()}")

    def add(self, robot: str, content: str, **body: Any) -> httpx.Response:
        return httpx.post(
            f"{self.url}/v1/robots/{robot}/memories",
            json={"content": content, **body},
            timeout=30,
        )

    def stop(self) -> int:
        """SIGINT (a Ctrl-C), then its exit status."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self) -> None:
        """SIGKILL, to it and its children: `--workers`' processes outlive a killed supervisor."""
        if self.proc is not None and self.proc.poll() is None:
            children = psutil.Process(self.proc.pid).children(recursive=True)
            self.proc.kill()
            self.proc.wait()
            for child in children:
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "pgdata" / "postmaster.pid").read_text().split()[0])


def leave_nothing_running(data_dir: Path) -> None:
    """After a test, whatever happened: the embedded servers of data_dir are gone (a
    service that was killed, or a test that failed, leaves them to nobody)."""
    from app.embedded import servers_in
    from app.embedded.processes import alive

    for pid in servers_in(data_dir / "redis"):
        os.kill(pid, signal.SIGKILL)
    try:
        pid = postmaster_pid(data_dir)
    except (OSError, ValueError, IndexError):
        return
    if alive(pid):
        os.kill(pid, signal.SIGINT)  # a fast shutdown
        deadline = time.monotonic() + 30
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
