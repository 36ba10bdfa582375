"""`htm serve --workers N`: N processes serving one port under uvicorn's supervisor, each
draining as one process does (app/http/serving.py).

It overrides uvicorn's supervisor (its `Process` and checks), written against uvicorn 0.54.
"""

from __future__ import annotations

import logging
import os
from socket import socket

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess
from uvicorn.supervisors.multiprocess import Process as UvicornProcess

from app.config import Settings
from app.http.serving import DrainingServer, uvicorn_config

log = logging.getLogger("htm")


class WorkerProcess(UvicornProcess):
    """uvicorn's worker process, serving with the drain (DrainingServer)."""

    def __init__(self, config: uvicorn.Config, sockets: list[socket], grace_s: float) -> None:
        self.grace_s = grace_s
        super().__init__(config, sockets)

    @property
    def server(self) -> uvicorn.Server:
        if self._server is None:
            self._server = DrainingServer(config=self.config, grace_s=self.grace_s)
        return self._server


class Workers(Multiprocess):
    """uvicorn's supervisor (a worker that dies is replaced, one that fails at start stops
    them all; SIGTERM or SIGINT stops them all, each draining as one process does), its
    processes WorkerProcesses. (uvicorn's SIGHUP restart makes plain workers, without the
    drain's grace period.)"""

    def __init__(self, config: uvicorn.Config, sockets: list[socket], grace_s: float) -> None:
        super().__init__(config, sockets)
        self.grace_s = grace_s

    def terminate_all(self) -> None:
        # The workers hold the listening socket; once the last has drained, a connect is
        # refused at once rather than left waiting in the queue of this copy.
        for sock in self.sockets:
            sock.close()
        super().terminate_all()

    def init_processes(self) -> None:
        for _ in range(self.processes_num):
            process = WorkerProcess(self.config, self.sockets, self.grace_s)
            process.start()
            self.processes.append(process)

    def keep_subprocess_alive(self) -> None:
        if self.should_exit.is_set():
            return
        for idx, process in enumerate(self.processes):
            if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                continue
            process.kill()
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                # It failed before serving (the app, the database, the socket): so would a
                # replacement. Stop them all, as uvicorn's supervisor does.
                log.error("worker process %s failed to start: stopping", process.pid)
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            log.warning("worker process %s died: starting another", process.pid)
            replacement = WorkerProcess(self.config, self.sockets, self.grace_s)
            replacement.start()
            self.processes[idx] = replacement


def run_workers(
    settings: Settings, host: str, port: int, workers: int, *, access_log: bool = False
) -> None:
    """Serve on host:port from `workers` processes sharing one listening socket (uvicorn's
    supervisor), until a signal drains and stops them. Each worker builds its app from the
    environment: `settings`' database and Redis URLs are put there first."""
    if settings.database_url:
        os.environ["HTM_DATABASE_URL"] = settings.database_url
    if settings.redis_url:
        os.environ["HTM_REDIS_URL"] = settings.redis_url
    log.info("serving on http://%s:%s from %d processes", host, port, workers)
    config = uvicorn_config(
        "app.main:worker_app", settings, host, port,
        access_log=access_log, worker=True, factory=True, workers=workers,
    )  # fmt: skip
    sock = config.bind_socket()
    try:
        Workers(config, [sock], settings.shutdown_grace_s).run()
    finally:
        sock.close()
