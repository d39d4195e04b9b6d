"""`faultline --version` and `faultline.__version__` say which distribution is installed, read from its metadata."""

from __future__ import annotations

import importlib.metadata

import pytest

import faultline
from faultline.cli import main


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flag_prints_the_installed_version(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:  # argparse ends the process after printing, as it does for --help
        main([flag])
    assert stopped.value.code == 0
    out, err = capsys.readouterr()
    assert out == f"faultline {importlib.metadata.version('faultline')}\n"
    assert err == ""


def test_package_version_is_the_metadata_version() -> None:
    assert faultline.__version__ == importlib.metadata.version("faultline")
