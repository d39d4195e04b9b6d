"""`--model local`: a llama.cpp server started for the command and stopped after, or one readable line why not."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from faultline._errors import FaultlineError
from faultline.cli import main
from faultline.core import ChatMessage, LlmRequest
from faultline.runtime import local_model_server
from faultline.runtime.models import OpenAIBackend, OpenAISettings


def _installed() -> str:
    """Why the local model cannot run here ("" when it can)."""
    from faultline.runtime._local_model import find_gguf, find_server

    try:
        find_server(), find_gguf()
    except FaultlineError as exc:
        return str(exc)
    return ""


@pytest.mark.parametrize(
    "command",
    [["run", "--tasks", "1", "--journal", "j.sqlite"], ["fama", "analyze", "j.sqlite"], ["doctor"]],
    ids=["run", "fama analyze", "doctor"],
)
def test_without_the_server_a_command_says_how_to_install_it_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("FAULTLINE_LLAMA_SERVER", raising=False)
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "j.sqlite").touch()  # `fama analyze` checks its journal exists before it starts anything
    assert main([*command, "--model", "local"]) != 0
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "no llama-cpp-server" in line and "make real" in line


@pytest.mark.parametrize("threads", ["two", "0"])
def test_a_bad_thread_count_is_one_line_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], threads: str
) -> None:
    monkeypatch.setenv("FAULTLINE_LLAMA_THREADS", threads)
    monkeypatch.chdir(tmp_path)
    assert main(["doctor", "--model", "local"]) != 0
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"$FAULTLINE_LLAMA_THREADS is {threads!r}" in line
    assert not list(tmp_path.iterdir())


@pytest.mark.local
@pytest.mark.skipif(bool(_installed()), reason=f"local model not installed: {_installed()}")
async def test_the_local_server_answers_through_the_openai_client_and_stops(tmp_path: Path) -> None:
    with local_model_server(log_file=tmp_path / "server.log") as url:
        settings = OpenAISettings(base_url=url, model="local", max_tokens=8, timeout_s=300)
        async with OpenAIBackend(settings) as backend:
            request = LlmRequest(role="user", messages=[ChatMessage(role="user", content="Say hello.")])
            response = await backend.complete(request)
        assert response.content.strip()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{url}/models", timeout=5)


@pytest.mark.local
@pytest.mark.skipif(bool(_installed()), reason=f"local model not installed: {_installed()}")
def test_the_local_server_ends_with_a_command_killed_by_sigkill(tmp_path: Path) -> None:
    holder = "from faultline.runtime import local_model_server\nwith local_model_server() as url:\n    print(url, flush=True)\n    input()"
    with subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        urllib.request.urlopen(f"{url}/models", timeout=5).close()
        process.kill()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # polls the port: the kernel ends the server once its parent died
        try:
            urllib.request.urlopen(f"{url}/models", timeout=2).close()
        except (urllib.error.URLError, OSError):
            return
        time.sleep(0.2)
    pytest.fail(f"the server on {url} outlived the process that started it")
