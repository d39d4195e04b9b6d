"""A near miss is answered with the closest name: a command, a subcommand, a choice, a config key."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultline.cli import main


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["replya"], "invalid choice: 'replya': did you mean 'replay'? (choose from 'run', "),
        (
            ["journal", "epsiodes", "x"],
            "journal: argument COMMAND: invalid choice: 'epsiodes': did you mean 'episodes'?",
        ),
        (["run", "--model", "sin"], "run: argument --model: invalid choice: 'sin': did you mean 'sim'?"),
    ],
)
def test_a_mistyped_name_is_one_line_that_names_the_closest(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.splitlines()) == 1


def test_a_name_close_to_nothing_gets_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zzzzzz"]) == 2
    assert "did you mean" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[plugins]\npaht = ["."]\n', "unknown field paht (did you mean path?) - at $.plugins"),
        ('[models.writer]\nbakend = "sim"\n', "unknown field bakend (did you mean backend?) - at $.models.writer"),
        ('[journl]\npath = "x"\n', "unknown field journl (did you mean journal?)"),
        ('[plugins]\nzzzz = ["."]\n', "unknown field zzzz - at $.plugins"),
    ],
)
def test_a_mistyped_config_key_names_the_closest_key_of_its_table(
    tmp_path: Path, text: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "faultline.toml"
    path.write_text(text)
    assert main(["config", "check", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert err == f"faultline: error: {path}: Object contains {said}\n"
