"""The controller over a journal file: the same agent and the same stages, without a bus.

`faultline fama analyze` and `fama loop` use it. Each (domain, model) gets its own controller
instance, as on the bus, and is handed the failures of the journal in stream order.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from faultline.agents.fama._case import FailureCase, failure_case
from faultline.agents.fama._controller import (
    ANALYSIS,
    FAILED,
    ROSTER,
    Analysis,
    FamaController,
    case_message,
    controller_episode,
)
from faultline.core import AgentHarness, ModelBackend, Notice
from faultline.journal import JournalReader
from faultline.runtime import FamaConfig


class CaseReport(msgspec.Struct, frozen=True, kw_only=True):
    """One failure and what the controller made of it: an analysis, or the error that stopped it."""

    episode: str
    domain: str
    model: str
    task: str
    outcome: str
    analysis: Analysis | None = None
    error: str = ""
    model_calls: int = 0


class JournalAnalysis(msgspec.Struct, frozen=True, kw_only=True):
    """Every failure analysed, and each roster decision with the counts behind it."""

    cases: list[CaseReport] = []
    decisions: list[dict[str, Any]] = []


def failure_cases(path: str | Path, episodes: Iterable[str] | None = None) -> list[FailureCase]:
    """The failed episodes of a journal as cases, in stream order (the others are left out)."""
    with JournalReader(path) as reader:
        found = (failure_case(row.envelope() for row in rows) for _, rows in reader.by_episode(episodes))
        return [case for case in found if case is not None]


async def analyze_cases(cases: list[FailureCase], backend: ModelBackend, settings: FamaConfig) -> JournalAnalysis:
    """Hand each case to the controller of its (domain, model) and collect what it journals."""
    harnesses: dict[str, AgentHarness] = {}
    reports: list[CaseReport] = []
    decisions: list[dict[str, Any]] = []
    for case in cases:
        episode = controller_episode(case.domain, case.model)
        harness = harnesses.get(episode)
        if harness is None:
            harness = harnesses[episode] = AgentHarness(FamaController(), episode=episode, backend=backend)
        calls = len(harness.recordings)
        report = CaseReport(
            episode=case.episode, domain=case.domain, model=case.model, task=case.task, outcome=case.outcome
        )
        for output in await harness.deliver(case_message(case, settings)):
            notice = output.body
            assert isinstance(notice, Notice)
            if notice.text == ANALYSIS:
                analysis = msgspec.convert(notice.data, Analysis)
                report = msgspec.structs.replace(report, analysis=analysis)
            elif notice.text == FAILED:
                report = msgspec.structs.replace(report, error=str(notice.data.get("error", "")))
            elif notice.text == ROSTER:
                decisions.append(dict(notice.data) | {"after": case.episode})
        reports.append(msgspec.structs.replace(report, model_calls=len(harness.recordings) - calls))
    return JournalAnalysis(cases=reports, decisions=decisions)
