from pathlib import Path

import pytest

from faultline._errors import UsageError
from faultline.cli._plots import count_axis, png


def test_png_writes_a_png_file_and_says_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`report --plot`, `compare --plot` and `fama --plot` wrote their file without a word."""
    target = tmp_path / "out.png"
    with png(target) as figure:
        figure.add_subplot().bar(["a", "b"], [1, 2])
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr() == ("", f"plot written to {target}\n")


def test_png_refuses_another_suffix_and_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="must end in .png"):
        with png(tmp_path / "out.svg"):
            pass
    with pytest.raises(UsageError, match="does not exist"):
        with png(tmp_path / "nowhere" / "out.png"):
            pass


def test_png_writes_nothing_when_the_block_fails(tmp_path: Path) -> None:
    target = tmp_path / "out.png"
    with pytest.raises(RuntimeError):
        with png(target):
            raise RuntimeError("no data")
    assert not target.exists()


def test_count_axis_reads_whole_numbers_from_zero_also_when_every_count_is_zero(tmp_path: Path) -> None:
    """One trial and no failures once drew a k axis from 0.96 to 1.04 and counts from -0.04 to 0.04."""
    with png(tmp_path / "out.png") as figure:
        empty, counted = figure.subplots(1, 2)
        empty.bar(["a"], [0])
        count_axis(empty, 0)
        counted.bar(["a", "b"], [1, 3])
        count_axis(counted, 3)
        assert empty.get_ylim()[0] == 0 and empty.get_ylim()[1] >= 1
        assert [t for t in counted.get_yticks() if 0 <= t <= 3] == [0, 1, 2, 3]
        assert [text.get_text() for text in empty.texts] == ["none"]
