"""What the three FAMA stages ask the judge model, and how their answers are read.

Every answer is one JSON object (a fenced block is accepted); anything else, a refusal included,
is an `AnswerFormatError` that says what was wrong, and the controller journals the failure and
skips the case. Requests carry `metadata` for the offline judge (`sim` "judge"): the stage, the
category, and the case's evidence, which real backends ignore.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from faultline._errors import AnswerFormatError, ConfigError
from faultline.agents.fama._case import FailureCase
from faultline.agents.fama._categories import CATEGORIES, CATEGORY_IDS, HELPER_FUNCTIONS, MITIGATION, Category
from faultline.core import HELPERS, ChatMessage, LlmRequest, parse_roster

ANALYST = """You analyse why a tool-using support agent failed a task. You look for one kind of error only:
{title}.

Definition: {definition}

Causes of this error (answer with the number of the one that fits best):
{causes}

You get the user's instruction, the full trajectory (user turns, agent turns, tool calls and their
results, numbered), the actions a correct agent would have made, and the facts it had to tell the
user. An agent that made this error and then corrected it did not fail because of it: say so.

Answer with one JSON object and nothing else:
{{"verdict": "yes" or "no", "cause": <cause number, 0 when the verdict is no>, "turn": <trajectory
number where the error is, or -1>, "recovered": true or false, "rationale": "<two sentences at most>",
"evidence": [<what you used: "trajectory", "gold_actions", "required_outputs", "attribution">]}}"""

ORCHESTRATOR = """You decide the main reason a tool-using support agent failed a task. Four analysts, one per
error category, each gave a verdict. Read them with the trajectory and name the category or
categories that made the task fail. An error the agent made and then recovered from is not a main
reason. Categories: {categories}.

Answer with one JSON object and nothing else:
{{"main": [<category ids, most important first>], "recovered": [<category ids of errors the agent
recovered from>], "rationale": "<two sentences at most>"}}"""

MITIGATION_PROMPT = """You choose helper agents for a tool-using support agent. Helpers give it context before each
decision; each one costs tokens and time, so choose the smallest set that addresses the errors named.

Helpers (use these names; memory takes the number of user turns it keeps, as memory:6):
{helpers}

Answer with one JSON object and nothing else:
{{"helpers": [<helper names>], "rationale": "<two sentences at most>"}}"""


class AnalystVerdict(msgspec.Struct, frozen=True, kw_only=True):
    category: str
    verdict: bool
    cause: int = 0
    turn: int = -1
    recovered: bool = False
    rationale: str = ""
    evidence: list[str] = []


class MainError(msgspec.Struct, frozen=True, kw_only=True):
    main: list[str] = []
    recovered: list[str] = []
    rationale: str = ""


class Mitigation(msgspec.Struct, frozen=True, kw_only=True):
    helpers: list[str] = []
    rationale: str = ""


def _case_text(case: FailureCase) -> str:
    gold = "\n".join(f"- {json.dumps(a, sort_keys=True)}" for a in case.gold_actions) or "- (not known)"
    outputs = "\n".join(f"- {o}" for o in case.required_outputs) or "- (none)"
    text = (
        f"# Instruction\n{case.instruction or '(not known)'}\n\n# Trajectory\n{case.transcript()}\n\n"
        f"# Outcome\n{case.outcome}: {case.cause}\n\n# Correct actions\n{gold}\n\n# Facts to tell the user\n{outputs}"
    )
    found = case.evidence.decisive
    if found is None:
        return text
    confidence = "" if found.confidence is None else f", success rate of the changed step {found.confidence:.2f}"
    return (
        f"{text}\n\n# Attribution (replaying the episode with one step changed)\nstep {found.step} of agent "
        f"{found.agent} decided the failure ({found.category or 'no category'}; {found.method}{confidence}"
        f"{'' if found.decided else ', not singled out'})"
    )


def _meta(case: FailureCase, stage: str, **more: Any) -> dict[str, Any]:
    evidence = msgspec.to_builtins(case.evidence)
    return {"sim": "judge", "stage": stage, "evidence": evidence, **more}


def analyst_request(case: FailureCase, cat: Category, role: str) -> LlmRequest:
    causes = "\n".join(f"{i}. {c}" for i, c in enumerate(cat.causes, 1))
    system = ANALYST.format(title=cat.title, definition=cat.definition, causes=causes)
    return LlmRequest(
        role=role,
        messages=[ChatMessage(role="system", content=system), ChatMessage(role="user", content=_case_text(case))],
        temperature=0.0,
        metadata=_meta(case, "analyst", category=cat.id),
    )


def orchestrator_request(case: FailureCase, verdicts: list[AnalystVerdict], role: str) -> LlmRequest:
    listing = ", ".join(f"{c.id} ({c.title})" for c in CATEGORIES)
    found = "\n".join(json.dumps(msgspec.to_builtins(v), sort_keys=True) for v in verdicts)
    return LlmRequest(
        role=role,
        messages=[
            ChatMessage(role="system", content=ORCHESTRATOR.format(categories=listing)),
            ChatMessage(role="user", content=f"{_case_text(case)}\n\n# Analysts' verdicts\n{found}"),
        ],
        temperature=0.0,
        metadata=_meta(case, "orchestrator", verdicts=[msgspec.to_builtins(v) for v in verdicts]),
    )


def mitigation_request(case: FailureCase, main: MainError, role: str) -> LlmRequest:
    helpers = "\n".join(f"- {name}: {text}" for name, text in HELPER_FUNCTIONS.items())
    named = "\n".join(f"- {c.id}: {c.title}. {c.definition}" for c in CATEGORIES if c.id in main.main)
    return LlmRequest(
        role=role,
        messages=[
            ChatMessage(role="system", content=MITIGATION_PROMPT.format(helpers=helpers)),
            ChatMessage(role="user", content=f"# Errors that made the task fail\n{named}"),
        ],
        temperature=0.0,
        metadata=_meta(case, "mitigation", main=main.main, pairs={k: list(v) for k, v in MITIGATION.items()}),
    )


_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


def _json_object(content: str, stage: str) -> dict[str, Any]:
    fenced = _FENCE.search(content)
    text = fenced.group(1) if fenced else content[content.find("{") : content.rfind("}") + 1]
    try:
        value = json.loads(text) if text else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise AnswerFormatError(f"{stage}: the answer is not one JSON object: {content[:200]!r}")
    return value


def parse_analyst(content: str, category_id: str) -> AnalystVerdict:
    """An analyst's answer; AnswerFormatError when the verdict is not yes or no or a field has the wrong type."""
    data = _json_object(content, f"analyst {category_id}")
    verdict = str(data.get("verdict", "")).strip().lower()
    if verdict not in ("yes", "no"):
        raise AnswerFormatError(f"analyst {category_id}: verdict must be yes or no, got {data.get('verdict')!r}")
    try:
        return msgspec.convert(
            {k: v for k, v in data.items() if k in ("cause", "turn", "recovered", "rationale", "evidence")}
            | {"category": category_id, "verdict": verdict == "yes"},
            AnalystVerdict,
        )
    except msgspec.ValidationError as exc:
        raise AnswerFormatError(f"analyst {category_id}: {exc}") from None


def parse_main(content: str) -> MainError:
    """The orchestrator's answer; category ids outside the four are refused."""
    data = _json_object(content, "orchestrator")
    try:
        found = msgspec.convert({k: v for k, v in data.items() if k in MainError.__struct_fields__}, MainError)
    except msgspec.ValidationError as exc:
        raise AnswerFormatError(f"orchestrator: {exc}") from None
    unknown = [c for c in [*found.main, *found.recovered] if c not in CATEGORY_IDS]
    if unknown:
        raise AnswerFormatError(f"orchestrator: unknown categories {unknown}; use {', '.join(CATEGORY_IDS)}")
    return found


def parse_mitigation(content: str) -> Mitigation:
    """The mitigation agent's answer, its helpers as a canonical roster."""
    data = _json_object(content, "mitigation")
    helpers = data.get("helpers")
    if not isinstance(helpers, list) or not all(isinstance(h, str) for h in helpers):
        raise AnswerFormatError(f"mitigation: helpers must be a list of names from {', '.join(HELPERS)}")
    try:
        roster = parse_roster(helpers)
    except ConfigError as exc:
        raise AnswerFormatError(f"mitigation: {exc}") from None
    return Mitigation(helpers=roster, rationale=str(data.get("rationale", "")))
