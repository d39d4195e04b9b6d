"""A run fills up to its concurrency at a bounded rate of starts, then starts an episode as one completes."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultline.api import RunSpec, _plan, run


def test_a_run_starts_its_first_episodes_at_the_start_rate_and_the_rest_as_others_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []

    async def noted(deadline: float) -> None:
        waits.append(deadline)  # what the runner waits for, not waited: the test checks the schedule, not time

    monkeypatch.setattr(_plan, "sleep_until", noted)
    spec = RunSpec(tasks=3, trials=2, concurrency=4, start_rate=50.0, journal=tmp_path / "j.sqlite", insecure=True)
    report = run(spec)
    assert report.summary.outcomes == {"success": 6}
    assert len(waits) == 4  # the first four fill the run; the last two start as two complete
    assert [round(w - waits[0], 6) for w in sorted(waits)] == [0.0, 0.02, 0.04, 0.06]
