from pathlib import Path

import pytest

from faultline._errors import UsageError
from faultline.cli._plots import png


def test_png_writes_a_png_file(tmp_path: Path) -> None:
    target = tmp_path / "out.png"
    with png(target) as figure:
        figure.add_subplot().bar(["a", "b"], [1, 2])
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
