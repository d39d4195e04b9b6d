"""docs/api.md is executed as a user would run it: its Python blocks in order, in an empty folder."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from faultline.api import RunReport, RunSpec, replay, run

API_DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


@pytest.mark.slow
def test_the_api_page_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(API_DOC.read_text())
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"__name__": "api_doc"}
    for number, block in enumerate(blocks, start=1):
        exec(compile(block, f"docs/api.md block {number}", "exec"), namespace)  # noqa: S102 - the page is ours
    report = namespace["report"]
    assert isinstance(report, RunReport)
    assert report.summary.outcomes.get("failure", 0) > 0  # the attribution block had a failure to explain


@pytest.mark.slow
def test_a_run_from_a_thread_as_in_a_notebook_completes(tmp_path: Path) -> None:
    """Jupyter's event loop runs in the main thread; the documented way out is a worker thread."""
    spec = RunSpec(tasks=1, journal=tmp_path / "thread.sqlite")

    async def notebook_cell() -> RunReport:
        return await asyncio.to_thread(run, spec)

    report = asyncio.run(notebook_cell())
    assert report.summary.outcomes == {"success": 1}
    assert report.signal is None
    assert replay(report.journal).identical
