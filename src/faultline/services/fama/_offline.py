"""The controller over a journal file: the same agent and the same stages, without a bus.

`faultline fama analyze` and `fama loop` use it. Each (domain, model) gets its own controller
instance, as on the bus, and is handed the failures of the journal in stream order.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import msgspec

from faultline.core import AgentHarness, ModelBackend, Notice
from faultline.journal import JournalReader
from faultline.replay import attribute_episode
from faultline.runtime import Config, FamaConfig, agent_lookup, make_backend
from faultline.services.fama._case import Analysts, Decisive, FailureCase, failure_case, with_attribution
from faultline.services.fama._controller import (
    ANALYSIS,
    FAILED,
    ROSTER,
    Analysis,
    FamaController,
    case_message,
    controller_episode,
)

ATTRIBUTION_METHODS: dict[str, Literal["auto", "oracle-guided repair"]] = {
    "oracle": "oracle-guided repair",
    "auto": "auto",
}
"""`[fama] attribution` to the attribution's method."""


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
    decisive: Decisive | None = None
    """The attribution's decisive step: among informed analysts' evidence, beside trajectory analysts' verdicts."""


class JournalAnalysis(msgspec.Struct, frozen=True, kw_only=True):
    """Every failure analysed, and each roster decision with the counts behind it."""

    cases: list[CaseReport] = []
    decisions: list[dict[str, Any]] = []


def failure_cases(
    path: str | Path, episodes: Iterable[str] | None = None, analysts: Analysts = "trajectory"
) -> list[FailureCase]:
    """The failed episodes of a journal as cases for these analysts, in stream order (the others are left out)."""
    with JournalReader(path) as reader:
        found = (failure_case((row.envelope() for row in rows), analysts) for _, rows in reader.by_episode(episodes))
        return [case for case in found if case is not None]


async def attribute_cases(path: str | Path, cases: list[FailureCase], config: Config) -> list[FailureCase]:
    """The cases with the attribution's decisive step (`[fama] attribution`); its forks go to the
    journal's forks file, never into `path`."""
    return [await attribute_case(path, case, config) for case in cases]


async def attribute_case(path: str | Path, case: FailureCase, config: Config) -> FailureCase:
    """One case with the attribution's decisive step, as `attribute_cases`; unchanged when attribution is off."""
    if config.fama.attribution == "off":
        return case
    found = await attribute_episode(
        path,
        case.episode,
        lookup=agent_lookup(config),
        backends=lambda role: make_backend(config, role),
        method=ATTRIBUTION_METHODS[config.fama.attribution],
        handler_timeout_s=config.handler_timeout_s,
        system=config.system.class_,
    )
    return with_attribution(case, found)


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
            episode=case.episode,
            domain=case.domain,
            model=case.model,
            task=case.task,
            outcome=case.outcome,
            decisive=case.evidence.decisive,
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
