"""The FAMA controller as an agent: three journaled stages per failed episode, and a roster chosen
from the counts over a window of them.

One instance serves one (domain, model): its episode is `controller_episode(domain, model)`, and
each failure reaches it as a `Note` (`CASE`) holding the `FailureCase` and the `[fama]` settings
in force, so that a replay decides as the live controller did, whatever the configuration is then. Every model call goes
through `ctx.llm` with the configured judge role, so replay serves the same verdicts and the
controller's decisions replay exactly. Its outputs are `Notice`s, journaled and delivered to no one:

- `fama_analysis`: the four verdicts, the main error(s) and the helpers recommended;
- `fama_failed`: a stage whose model call failed or whose answer could not be read (the case is
  skipped and counts nothing);
- `fama_roster`: the roster changed, with the counts that chose it. Whoever runs the controller
  publishes it on `fl.ctl.helpers` (unless `dry_run`).
"""

from __future__ import annotations

import logging
import re
from collections import Counter, deque
from typing import Any, ClassVar

import msgspec

from faultline._errors import FaultlineError
from faultline.core import Agent, Context, Envelope, Note, Notice, helper_name, parse_roster
from faultline.runtime import FamaConfig
from faultline.services.fama._case import FailureCase
from faultline.services.fama._categories import CATEGORIES
from faultline.services.fama._prompts import (
    AnalystVerdict,
    MainError,
    Mitigation,
    analyst_request,
    mitigation_request,
    orchestrator_request,
    parse_analyst,
    parse_main,
    parse_mitigation,
)

log = logging.getLogger(__name__)

CONTROLLER = "fama"
"""The controller's agent name."""
CASE = "fama_case"
ANALYSIS = "fama_analysis"
FAILED = "fama_failed"
ROSTER = "fama_roster"


class Analysis(msgspec.Struct, frozen=True, kw_only=True):
    """What the three stages made of one failure."""

    episode: str
    verdicts: list[AnalystVerdict]
    main: MainError
    mitigation: Mitigation


def controller_episode(domain: str, model: str) -> str:
    """The controller's episode for (domain, model): one subject token."""
    token = re.sub(r"[^A-Za-z0-9_-]+", "_", f"{domain}-{model}")
    return f"fama-{token}"[:64]


def case_message(case: FailureCase, settings: FamaConfig) -> Note:
    """The controller's input for one failure, with the settings it decides by."""
    return Note(text=CASE, data={"case": msgspec.to_builtins(case), "settings": msgspec.to_builtins(settings)})


async def analyze(case: FailureCase, ctx: Context, role: str) -> Analysis:
    """The three FAMA stages for one case; raises FaultlineError (ModelError, AnswerFormatError) when one fails."""
    verdicts = []
    for cat in CATEGORIES:
        answer = await ctx.llm(analyst_request(case, cat, role))
        verdicts.append(parse_analyst(answer.content, cat.id, case.shown()))
    main = parse_main((await ctx.llm(orchestrator_request(case, verdicts, role))).content)
    helpers = Mitigation()
    if main.main:
        helpers = parse_mitigation((await ctx.llm(mitigation_request(case, main, role))).content)
    return Analysis(episode=case.episode, verdicts=verdicts, main=main, mitigation=helpers)


def choose_roster(recommended: list[list[str]], settings: FamaConfig) -> list[str]:
    """The helpers recommended for at least `share` of the analysed failures (none before `min_failures`).
    This combination rule is Faultline's own (the paper uses each task's recommendation for that task,
    `task_rosters`): one roster per (domain, model) that a live system can publish.

    A helper counts by name, so `memory:2` and `memory:6` are both votes for memory; memory then keeps the
    K recommended most often, the latest of those tied."""
    if len(recommended) < settings.min_failures:
        return []
    counts = Counter(helper_name(entry) for helpers in recommended for entry in set(helpers))
    chosen = {name for name, n in counts.items() if n >= settings.share * len(recommended)}
    return parse_roster([_entry_for(name, recommended) for name in chosen])


def _entry_for(name: str, recommended: list[list[str]]) -> str:
    """The roster entry for helper `name`: for memory, the `memory:K` recommended most often, the latest if tied."""
    entries = [e for helpers in recommended for e in helpers if helper_name(e) == name]
    counts = Counter(entries)
    return max(reversed(entries), key=lambda e: counts[e])


def joined(roster: list[str], added: list[str]) -> list[str]:
    """`roster` with the helpers of `added` joined: a helper once chosen stays, and memory takes the K
    `added` gives it, if any."""
    kept = {helper_name(entry): entry for entry in roster}
    return parse_roster(list((kept | {helper_name(entry): entry for entry in added}).values()))


def task_rosters(recommended: list[tuple[str, list[str]]], rosters: dict[str, list[str]]) -> dict[str, list[str]]:
    """The FAMA paper's per-task use of the recommendations: each task in `rosters` (task -> its roster now)
    joins the helpers recommended for its own analysed failures, given as (task, helpers) in order; a
    task without one keeps its roster."""
    chosen = dict(rosters)
    for task, helpers in recommended:
        chosen[task] = joined(chosen.get(task, []), helpers)
    return chosen


def window_counts(analyses: list[Analysis]) -> dict[str, dict[str, int]]:
    """Category and helper counts over analysed failures, as journaled with a roster decision."""
    categories = Counter(c for a in analyses for c in a.main.main)
    helpers = Counter(h for a in analyses for h in a.mitigation.helpers)
    return {"categories": dict(sorted(categories.items())), "helpers": dict(sorted(helpers.items()))}


class FamaController(Agent):
    """Analyses each failed episode it is handed and keeps the roster of its (domain, model) up to date."""

    name: ClassVar[str] = CONTROLLER
    service: ClassVar[bool] = True

    def __init__(self) -> None:
        self.window: deque[Analysis] = deque()
        self.roster: list[str] = []

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        body = msg.body
        if not (isinstance(body, Note) and body.text == CASE):
            return
        settings = msgspec.convert(body.data["settings"], FamaConfig)
        case = msgspec.convert(body.data["case"], FailureCase)
        try:
            analysis = await analyze(case, ctx, settings.role)
        except FaultlineError as exc:
            log.warning("fama: analysis of episode %s skipped: %s", case.episode, exc)
            ctx.emit(Notice(text=FAILED, data={"episode": case.episode, "error": f"{type(exc).__name__}: {exc}"}))
            return
        ctx.emit(Notice(text=ANALYSIS, data=msgspec.to_builtins(analysis) | _key(case)))
        self.window.append(analysis)
        while len(self.window) > settings.window:
            self.window.popleft()
        chosen = choose_roster([a.mitigation.helpers for a in self.window], settings)
        if chosen != self.roster:
            self.roster = chosen
            data: dict[str, Any] = _key(case) | {
                "roster": chosen,
                "failures": len(self.window),
                "counts": window_counts(list(self.window)),
                "dry_run": settings.dry_run,
            }
            ctx.emit(Notice(text=ROSTER, data=data))


def _key(case: FailureCase) -> dict[str, Any]:
    return {"domain": case.domain, "model": case.model}
