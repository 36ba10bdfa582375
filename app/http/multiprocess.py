"""`htm serve --workers N`: N processes serving one port under uvicorn's supervisor, each
draining as one process does (app/http/serving.py).

A worker is not judged by the supervisor's health check until it serves: it cannot answer
before its imports are done, seconds on a loaded machine, which uvicorn's 5 s check took
for a hung worker, replacing it again and again. The local model's ONNX export, when due, is
made once before the workers start rather than by each at once. The embedded servers' health
the supervisor knows is shared with the workers' /readyz.

It overrides uvicorn's supervisor (its `Process`, checks and termination), written against
uvicorn 0.54: pyproject.toml pins that minor.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from socket import socket

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess
from uvicorn.supervisors.multiprocess import Process as UvicornProcess

from app.config import Settings
from app.embedded.supervisor import SharedHealth
from app.embeddings.factory import pending_export
from app.embeddings.onnx_model import ensure_exported
from app.http.serving import DrainingServer, announce_ready, uvicorn_config
from app.observability.logs import configure as configure_logging

log = logging.getLogger("htm")

# A worker is judged by the supervisor's health check once it serves; until then only by
# this bound on its start (imports, the app, the model: seconds, more on a loaded machine).
START_TIMEOUT_S = 120.0


class WorkerProcess(UvicornProcess):
    """uvicorn's worker process, serving with the drain (DrainingServer), telling the
    supervisor when it serves (`started`), and reporting in /readyz what the supervisor
    knows of the embedded servers (`embedded`)."""

    def __init__(
        self,
        config: uvicorn.Config,
        sockets: list[socket],
        grace_s: float,
        embedded: SharedHealth | None,
    ) -> None:
        self.grace_s = grace_s
        self.embedded = embedded
        self.started = multiprocessing.get_context("spawn").Event()
        self.spawned_at = time.monotonic()
        super().__init__(config, sockets)

    @property
    def server(self) -> uvicorn.Server:
        if self._server is None:
            self._server = DrainingServer(
                config=self.config, grace_s=self.grace_s, on_started=self.started.set
            )
        return self._server

    def target(self, sockets: list[socket] | None = None) -> None:  # pragma: no cover
        if self.embedded is not None:
            self.embedded.register()
        super().target(sockets)


class Workers(Multiprocess):
    """uvicorn's supervisor, its processes WorkerProcesses: a worker that dies is replaced,
    the reason logged; one that fails at start stops them all; one starting is held to
    START_TIMEOUT_S rather than to the health check. SIGTERM or SIGINT stops them all, each
    draining as one process does. (uvicorn's SIGHUP restart and SIGTTIN make plain uvicorn
    workers, without the drain.)"""

    def __init__(
        self,
        config: uvicorn.Config,
        sockets: list[socket],
        grace_s: float,
        embedded: SharedHealth | None = None,
    ) -> None:
        super().__init__(config, sockets)
        self.grace_s = grace_s
        self.embedded = embedded
        self.announce = announce_ready(config.host, config.port)

    def _spawn(self) -> WorkerProcess:
        process = WorkerProcess(self.config, self.sockets, self.grace_s, self.embedded)
        process.start()
        return process

    def init_processes(self) -> None:
        self.processes.extend(self._spawn() for _ in range(self.processes_num))

    def terminate_all(self) -> None:
        # The workers hold the listening socket; once the last has drained, a connect is
        # refused at once rather than left waiting in the queue of this copy.
        for sock in self.sockets:
            sock.close()
        super().terminate_all()

    def keep_subprocess_alive(self) -> None:
        if self.should_exit.is_set():
            return
        if any(isinstance(p, WorkerProcess) and p.started.is_set() for p in self.processes):
            self.announce()  # a worker serves the socket: the port answers
        for idx, process in enumerate(self.processes):
            hung = self._hung(process)
            if hung is None and process.process.is_alive():
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
            why = hung or _exit_reason(process.exitcode)
            log.warning("worker process %s %s: starting another", process.pid, why)
            self.processes[idx] = self._spawn()

    def _hung(self, process: UvicornProcess) -> str | None:
        """Why a running `process` is to be killed as hung; None while it is fine, or once it
        has ended (its exit status says why)."""
        if not process.process.is_alive():
            return None
        timeout = self.config.timeout_worker_healthcheck
        if isinstance(process, WorkerProcess) and not process.started.is_set():
            if time.monotonic() - process.spawned_at < START_TIMEOUT_S:
                return None
            return f"did not start serving within {START_TIMEOUT_S:g} s"
        if process.ping(timeout) or not process.process.is_alive():  # or it died meanwhile
            return None
        return f"did not answer the supervisor's health check within {timeout} s"


def _exit_reason(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"was killed by {signal.Signals(-exitcode).name}"
    return f"exited with status {exitcode}"


def _export_model(settings: Settings) -> None:
    """The local model's ONNX export, made once before the workers start, which would each
    make it at once otherwise. In a process of its own: torch, which an export imports,
    would stay in the supervisor's memory (550 MB)."""
    export = pending_export(settings)
    if export is None:
        return
    model, models_dir, quantized = export
    log.info("exporting the embedding model %s before the workers start", model)
    with ProcessPoolExecutor(
        1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=configure_logging,
        initargs=(settings.log_format, settings.log_level),
    ) as pool:
        try:
            pool.submit(ensure_exported, model, models_dir, quantized=quantized).result()
        except Exception as exc:  # each worker meets it again, and fails or falls back
            log.warning("exporting the embedding model failed: %s", exc)


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
    _export_model(settings)
    log.info("starting the service on port %s from %d processes", port, workers)
    config = uvicorn_config(
        "app.main:worker_app", settings, host, port,
        access_log=access_log, worker=True, factory=True, workers=workers,
    )  # fmt: skip
    embedded = SharedHealth.of(settings.database_url, settings.redis_url)
    sock = config.bind_socket()
    try:
        with embedded.publishing() if embedded else contextlib.nullcontext():
            Workers(config, [sock], settings.shutdown_grace_s, embedded).run()
    finally:
        sock.close()
