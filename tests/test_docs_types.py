"""The Python files README.md and docs/ give a user to copy pass `mypy --strict`, as the project's own code does:
an example that reads `msg.body.text` of a body of any kind is a type error in its user's editor."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import faultline

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python(?: ([\w.]+))?\n(.*?)^```$", flags=re.MULTILINE | re.DOTALL)
DEFINES = re.compile(r"^(class|def|async def) ", flags=re.MULTILINE)


def whole_files() -> Iterator[tuple[str, str]]:
    """(file name, text) of each block that is a file of its own: it starts with its imports and defines something
    (the rest are fragments that go on from an earlier block)."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, (name, text) in enumerate(BLOCK.findall(doc.read_text()), start=1):
            if text.startswith(("import ", "from ")) and DEFINES.search(text):
                yield name or f"{doc.stem.replace('-', '_')}_{number}.py", text


@pytest.mark.slow
def test_the_examples_a_user_copies_pass_mypy_strict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mypy = pytest.importorskip("mypy.api")
    files = []
    for name, text in whole_files():
        (tmp_path / name).write_text(text)
        files.append(str(tmp_path / name))
    assert {"readme_2.py", "desk.py", "api_1.py", "faults_1.py"} <= {Path(f).name.lower() for f in files}
    (tmp_path / "mypy.ini").write_text("[mypy]\nstrict = True\n")
    monkeypatch.setenv("MYPYPATH", str(Path(faultline.__file__).parents[1]))
    out, err, status = mypy.run(
        ["--config-file", str(tmp_path / "mypy.ini"), "--cache-dir", str(tmp_path / ".c"), *files]
    )
    assert status == 0, out + err
