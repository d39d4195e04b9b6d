"""The simulator's stand-in for the FAMA judge: deterministic verdicts from what the request shows.

A SIMULATION for exercising the controller (its stages, recordings, window and roster), never a
result about models. The answer is a pure function of `request.metadata`, which the controller
fills with what the prompt shows (`faultline.services.fama`); it never sees the simulator's
mistake labels.

    analyst       trajectory analysts (metadata `analysts` "trajectory", the FAMA paper's mode): yes
                  when the trajectory shows a sign of its category (`_sim_trajectory.py`); informed
                  analysts: yes when a deviation of its category is in the evidence (recovered ones
                  say so) or the attribution's decisive step is of its category, and, for early_stop,
                  when the episode ended with ground-truth actions or required outputs left and no
                  unrecovered deviation explains it
    orchestrator  the categories of the analysts' yes verdicts that were not recovered
    mitigation    the helpers the request's pairs give for the main categories
"""

from __future__ import annotations

import json
from typing import Any

from faultline._errors import ModelError
from faultline.core import LlmRequest, LlmResponse, Usage
from faultline.envs import EARLY_STOP, ERROR_CATEGORIES
from faultline.runtime.models._sim_trajectory import read_trajectory

CAUSE = {"policy_violation": 3, "wrong_value": 6, "wrong_entity": 2, "early_stop": 4}
"""The cause number each analyst names (see the controller's cause lists)."""


def respond_judge(request: LlmRequest, words: int) -> LlmResponse:
    """The simulated answer to one FAMA stage; `words` is the prompt's size for the usage counts."""
    meta = request.metadata
    stage = meta.get("stage")
    evidence: dict[str, Any] = dict(meta.get("evidence") or {})
    if stage == "analyst" and meta.get("analysts") == "trajectory":
        answer = _trajectory_analyst(str(meta.get("category", "")), dict(meta.get("trajectory") or {}))
    elif stage == "analyst":
        answer = _analyst(str(meta.get("category", "")), evidence)
    elif stage == "orchestrator":
        answer = _orchestrator(list(meta.get("verdicts") or []))
    elif stage == "mitigation":
        pairs: dict[str, list[str]] = dict(meta.get("pairs") or {})
        helpers = list(dict.fromkeys(h for c in meta.get("main") or [] for h in pairs.get(c, [])))
        answer = {"helpers": helpers, "rationale": "the helpers paired with the main categories"}
    else:
        raise ModelError(f"sim: no simulated judge stage {stage!r} - at $.metadata.stage")
    return json_answer(answer, words, "judge")


def json_answer(answer: dict[str, Any], words: int, sim: str) -> LlmResponse:
    """A simulated judge's answer as the JSON a model would write; `words` is the prompt's size for the usage."""
    text = json.dumps(answer, sort_keys=True)
    return LlmResponse(
        content=text,
        usage=Usage(prompt_tokens=words, completion_tokens=len(text.split())),
        model="sim",
        finish_reason="stop",
        metadata={"sim": sim},
    )


def _known(category: str) -> None:
    if category not in ERROR_CATEGORIES:
        raise ModelError(f"sim: unknown category {category!r} - at $.metadata.category")


def _trajectory_analyst(category: str, shown: dict[str, Any]) -> dict[str, Any]:
    _known(category)
    found = read_trajectory(category, shown)
    if found is None:
        return _verdict(False, category, -1, False, "no sign of this error in the trajectory", ["trajectory"])
    return _verdict(True, category, found.turn, found.recovered, found.rationale, ["trajectory"], found.cause)


def _analyst(category: str, evidence: dict[str, Any]) -> dict[str, Any]:
    _known(category)
    deviations = list(evidence.get("deviations") or [])
    mine = [d for d in deviations if d.get("category") == category]
    unrecovered = [d for d in deviations if not d.get("recovered")]
    decisive: dict[str, Any] = dict(evidence.get("decisive") or {})
    used = ["trajectory", "gold_actions", "required_outputs"] + (["attribution"] if decisive else [])
    if not mine and decisive.get("category") == category:
        rationale = f"the attribution's decisive step {decisive.get('step')} of {decisive.get('agent')}"
        return _verdict(True, category, -1, False, rationale, used)
    if mine:
        first = next((d for d in mine if not d.get("recovered")), mine[0])
        recovered = bool(first.get("recovered"))
        rationale = f"turn {first.get('turn')}: {first.get('wrong')} where the ground truth has {first.get('right')}"
        if recovered:
            rationale += ", made right later"
        return _verdict(True, category, int(first.get("turn", -1)), recovered, rationale, used)
    left = evidence.get("unfinished") or evidence.get("missing_outputs")
    if category == EARLY_STOP and left and not unrecovered:
        rationale = (
            f"the conversation ended ({evidence.get('ended_by') or 'unknown'}) with {len(evidence.get('unfinished') or [])} actions and "
            + (f"{len(evidence.get('missing_outputs') or [])} required outputs left")
        )
        return _verdict(True, category, -1, False, rationale, used)
    return _verdict(False, category, -1, False, "no sign of this error against the ground truth", used)


def _verdict(
    yes: bool, category: str, turn: int, recovered: bool, rationale: str, used: list[str], cause: int = 0
) -> dict[str, Any]:
    """The answer's JSON object; a yes names `cause`, or the category's usual one (`CAUSE`) when 0."""
    return {
        "verdict": "yes" if yes else "no",
        "cause": (cause or CAUSE[category]) if yes else 0,
        "turn": turn,
        "recovered": recovered,
        "rationale": rationale,
        "evidence": used,
    }


def _orchestrator(verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    yes = [v for v in verdicts if v.get("verdict")]
    turn = lambda v: (v.get("turn", -1) < 0, v.get("turn", -1))  # noqa: E731 - errors without a turn come last
    main = [v["category"] for v in sorted(yes, key=turn) if not v.get("recovered")]
    recovered = [v["category"] for v in yes if v.get("recovered")]
    return {"main": main[:1], "recovered": recovered, "rationale": "the earliest error not recovered from"}
