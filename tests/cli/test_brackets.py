"""What agents, models and scorers wrote is printed as written: square brackets in it are text, never console
markup. A model's "[/INST]" in a cause made `journal episodes` fail with a traceback, and sim's own "[sim tool]"
prefix vanished from `diff`."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from faultline.cli import main
from faultline.core import AssistantTurn, EpisodeCompleted
from faultline.journal import Journal
from tests.journal.conftest import episode_envelopes, incoming

CAUSE = "expected 'A1', answered '[/INST] [sim tool] shipped'"


def bracketed(episode: str, text: str) -> list:  # type: ignore[type-arg]
    """ep's envelopes, failed with CAUSE, the assistant saying `text`."""
    envelopes = episode_envelopes(episode, outcome="failure")
    out = []
    for env in envelopes:
        if isinstance(env.body, EpisodeCompleted):
            env = msgspec.structs.replace(env, body=msgspec.structs.replace(env.body, cause=CAUSE))
        elif isinstance(env.body, AssistantTurn):
            env = msgspec.structs.replace(env, body=AssistantTurn(text=text, done=True))
        out.append(env)
    return out


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    path = tmp_path / "journal.db"
    with Journal.open(path) as writer:
        writer.append(incoming(bracketed("ep-a", "[sim tool] shipped [bold]A1[/bold]") + bracketed("ep-b", "[/INST]")))
    return path


@pytest.mark.parametrize(
    ("argv", "code", "shown"),
    [
        (["journal", "episodes", "{j}"], 0, [CAUSE]),
        (["journal", "show", "{j}", "--episode", "ep-a"], 0, [CAUSE, "[sim tool] shipped [bold]A1[/bold]"]),
        (["diff", "{j}:ep-a", "ep-b"], 1, ["[sim tool] shipped [bold]A1[/bold]", "[/INST]"]),
        (["compare", "{j}", "{j}"], 0, [CAUSE]),
    ],
    ids=["journal episodes", "journal show", "diff", "compare"],
)
def test_brackets_in_what_the_journal_holds_are_printed_as_text(
    journal: Path,
    argv: list[str],
    code: int,
    shown: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    assert main([a.format(j=journal) for a in argv]) == code
    out, err = capsys.readouterr()
    assert err == ""
    for text in shown:
        assert text in out, out
