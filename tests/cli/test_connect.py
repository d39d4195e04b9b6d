"""Every command that talks to a running system finds it the same way: its flags, else faultline.toml, else the
`faultline up` running in this folder, and only while that `up` runs."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faultline.bus import Credential, Login
from faultline.cli import main
from faultline.cli._connect import STATE_FILE, login, nats_url, subject_prefix
from faultline.runtime import Config

UNREACHABLE = "nats://127.0.0.1:1"


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _write_state(pid: int, **state: str) -> None:
    STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
    STATE_FILE.write_text(json.dumps({"pid": pid, **state}))


def _flags(**given: object) -> argparse.Namespace:
    return argparse.Namespace(**{"nats": "", "prefix": "", "creds": None, "tls_ca": None, "config": None, **given})


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    "argv",
    [["status"], ["inject", "storm"], ["faults", "list"], ["helpers", "list"], ["journal", "health"]],
)
@pytest.mark.parametrize(
    "state",
    [
        '{"url": "nats://127.0.0.1:1", "pi',
        '{"pid": 1180591620717411303424}',  # no process id: past what the system call takes (OverflowError)
        '{"pid": 1e400}',  # infinity
        "[" * 100_000 + "]" * 100_000,  # deeper than the decoder goes (RecursionError)
    ],
    ids=["cut-short", "huge-pid", "infinite-pid", "nested"],
)
def test_a_corrupt_state_file_is_one_line_not_a_traceback(
    argv: list[str], state: str, capsys: pytest.CaptureFixture[str]
) -> None:
    STATE_FILE.parent.mkdir()
    STATE_FILE.write_text(state)
    assert main([*argv, "--nats", UNREACHABLE]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("faultline: error: cannot reach NATS"), err


def test_a_stale_state_file_names_no_server(capsys: pytest.CaptureFixture[str]) -> None:
    _write_state(_dead_pid(), url=UNREACHABLE, prefix="theirs")
    assert main(["inject", "storm"]) == 2
    assert "no NATS server given" in capsys.readouterr().err


def test_the_credential_of_a_stopped_up_is_not_used(capsys: pytest.CaptureFixture[str]) -> None:
    _write_state(_dead_pid(), url=UNREACHABLE, credentials="/no/such/operator.creds")
    assert main(["status", "--nats", UNREACHABLE]) == 1
    err = capsys.readouterr().err
    assert "cannot reach NATS" in err and "operator.creds" not in err, err


def test_the_running_up_gives_its_url_prefix_and_ca_to_whoever_talks_to_its_server() -> None:
    _write_state(os.getpid(), url="nats://up:4222", prefix="upfl", tls_ca="/up/ca.pem", credentials="")
    config = Config()
    assert nats_url(_flags(), config) == "nats://up:4222"
    assert subject_prefix(_flags(), config, "nats://up:4222") == "upfl"
    assert login(_flags(), config, "nats://up:4222").tls_ca == Path("/up/ca.pem")
    assert subject_prefix(_flags(prefix="mine"), config, "nats://up:4222") == "mine"
    assert subject_prefix(_flags(), config, "nats://elsewhere:4222") == config.nats.prefix
    assert login(_flags(), config, "nats://elsewhere:4222").tls_ca is None
    assert subject_prefix(_flags(), config) == config.nats.prefix  # `up` and `credentials` name their own system


def test_a_stopped_up_gives_nothing() -> None:
    _write_state(_dead_pid(), url="nats://up:4222", prefix="upfl", tls_ca="/up/ca.pem")
    config = Config()
    assert subject_prefix(_flags(), config, "nats://up:4222") == config.nats.prefix
    assert login(_flags(), config, "nats://up:4222").tls_ca is None


def test_a_service_takes_the_running_ups_ca_but_never_its_operators_credential() -> None:
    """A worker, journal or memory service started by hand speaks as an identity of its own: given the operator's
    credential it would run with every permission, so it takes only the CA."""
    _write_state(os.getpid(), url="nats://up:4222", tls_ca="/up/ca.pem", credentials="/up/operator.json")
    service = login(_flags(), Config(), "nats://up:4222", operator=False)
    assert service.credential is None and service.tls_ca == Path("/up/ca.pem")


@pytest.mark.parametrize(
    ("argv", "module", "runner"),
    [
        (["worker", "--agents", "tool"], "faultline.cli._system", "run_worker"),
        (["journal", "serve", "j.sqlite", "--completers", "env"], "faultline.cli._system", "run_journal"),
        (["memory", "serve"], "faultline.cli._memory", "serve_memory"),
    ],
)
def test_a_service_started_by_hand_trusts_the_running_ups_ca(
    argv: list[str], module: str, runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was given neither, so against an `up --tls` it could not verify the server unless told --tls-ca."""
    _write_state(os.getpid(), url="nats://up:4222", tls_ca="/up/ca.pem", credentials="/up/operator.json")
    logins: list[Login] = []

    async def serve(*args: object, **kwargs: object) -> None:
        logins.extend(a for a in args if isinstance(a, Login))

    monkeypatch.setattr(importlib.import_module(module), runner, serve)
    assert main(argv) == 0
    assert logins == [Login(None, Path("/up/ca.pem"))]


def test_the_fama_service_started_by_hand_speaks_as_the_running_ups_operator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It publishes rosters, which only the operator may; it was given neither the credential nor the CA."""
    operator = tmp_path / "operator.json"
    operator.write_text('{"user": "operator", "password": "secret"}')
    _write_state(os.getpid(), url="nats://up:4222", tls_ca="/up/ca.pem", credentials=str(operator))
    logins: list[Login] = []

    async def serve(*args: object, **kwargs: object) -> None:
        logins.extend(a for a in args if isinstance(a, Login))

    monkeypatch.setattr(importlib.import_module("faultline.cli._fama"), "serve_fama", serve)
    assert main(["fama", "serve"]) == 0
    assert logins == [Login(Credential("operator", "secret"), Path("/up/ca.pem"))]
