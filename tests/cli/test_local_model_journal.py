"""Commands that read a journal file check it before `--model local` starts a model server."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultline.cli import main


@pytest.mark.parametrize(
    "command",
    [
        ["fama", "analyze", "JOURNAL"],
        ["attribute", "JOURNAL", "--all-failed"],
        ["fork", "JOURNAL", "-e", "e", "--at", "1", "--drop"],
    ],
    ids=["fama-analyze", "attribute", "fork"],
)
def test_a_missing_journal_is_one_line_and_exit_1_and_no_model_server_starts(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started = tmp_path / "started"
    server = tmp_path / "llama-cpp-server"
    server.write_text(f"#!/bin/sh\ntouch {started}\nexit 3\n")
    server.chmod(0o755)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("FAULTLINE_LLAMA_SERVER", str(server))
    monkeypatch.setenv("FAULTLINE_GGUF", str(gguf))
    absent = tmp_path / "absent.sqlite"
    code = main([str(absent) if word == "JOURNAL" else word for word in command] + ["--model", "local"])
    _, err = capsys.readouterr()
    assert code == 1
    assert err == f"faultline: error: {absent}: no such journal file or journal set\n"
    assert not started.exists()
