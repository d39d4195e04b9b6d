"""Logging: quiet by default, levels from flags or FAULTLINE_LOG, text for people, JSON for programs."""

from __future__ import annotations

import io
import json
import logging
import os

import pytest

from faultline._logging import configure, resolve_level
from faultline.cli import main


@pytest.fixture(autouse=True)
def _restore() -> None:
    yield  # type: ignore[misc]
    configure("WARNING")


def test_default_is_warning_and_the_environment_can_change_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAULTLINE_LOG", raising=False)
    assert resolve_level() == logging.WARNING
    monkeypatch.setenv("FAULTLINE_LOG", "debug")
    assert resolve_level() == logging.DEBUG
    assert resolve_level("error") == logging.ERROR
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        resolve_level("loud")


def test_json_lines_carry_the_structured_fields() -> None:
    out = io.StringIO()
    configure("INFO", stream=out, as_json=True)
    logging.getLogger("faultline.bus").info("dead-lettered", extra={"episode": "e1", "agent": "tool", "seq": 7})
    logging.getLogger("faultline.bus").debug("below the level")
    [line] = out.getvalue().splitlines()
    record = json.loads(line)
    assert (record["logger"], record["level"], record["message"]) == ("faultline.bus", "INFO", "dead-lettered")
    assert (record["episode"], record["agent"], record["seq"]) == ("e1", "tool", 7)


def test_text_lines_name_the_episode_and_agent() -> None:
    out = io.StringIO()
    configure("WARNING", stream=out, as_json=False)
    logging.getLogger("faultline.runtime").warning("handler failed", extra={"episode": "e2", "agent": "env"})
    assert out.getvalue().rstrip().endswith("WARNING faultline.runtime: handler failed (episode=e2 agent=env)")


def test_the_cli_flag_sets_the_level_for_child_processes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FAULTLINE_LOG", raising=False)
    assert main(["-v", "journal", "verify", "missing.sqlite"]) == 1
    assert os.environ["FAULTLINE_LOG"] == "INFO"
    capsys.readouterr()
    assert main(["--log-level", "shout", "journal", "verify", "missing.sqlite"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown log level 'shout'" in err


def test_records_go_to_the_stderr_of_the_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI configures logging once per command; a stderr swapped later (a test's capture) still gets lines."""
    configure("WARNING", as_json=False)
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    logging.getLogger("faultline.bus").warning("one")
    first.close()
    monkeypatch.setattr("sys.stderr", second)
    logging.getLogger("faultline.bus").warning("two")
    assert second.getvalue().rstrip().endswith("faultline.bus: two")


class _Terminal(io.StringIO):
    """A stream that says it is a terminal, as a person's stderr does."""

    def isatty(self) -> bool:
        return True


def test_a_terminal_reads_text_and_anything_else_json() -> None:
    """A user saw JSON records on stderr and took it for their terminal: only a stream that is not one gets JSON."""
    terminal, pipe = _Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        configure("WARNING", stream=stream)
        logging.getLogger("faultline.core").warning("handler failed", extra={"episode": "e1", "agent": "pantry"})
    assert terminal.getvalue().rstrip().endswith("WARNING faultline.core: handler failed (episode=e1 agent=pantry)")
    assert json.loads(pipe.getvalue())["message"] == "handler failed"
