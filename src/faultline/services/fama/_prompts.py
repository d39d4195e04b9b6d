"""What the three FAMA stages ask the judge model, and how their answers are read.

Every request asks for a JSON answer of a given schema (`response_format="json"` with
`response_schema`: servers that support structured output hold the model to the schema's keys and
values; the rationale's cap bounds the answer and each stage asks for enough tokens to finish it). The
prompts are short and name the exact keys without example values, which a small model copies. An
answer is read tolerantly (the first JSON object in it, fenced or amid prose; a lone name where a
list is asked for); anything else, a refusal included, is an `AnswerFormatError` that says what was
wrong, and the controller journals the failure and skips the case. Requests carry `metadata` for
the offline judge (`sim` "judge"), which real backends ignore: the stage, the category, and what the
prompt shows, in a form the stand-in reads without parsing prose.

What a request shows follows the case's `analysts`. A trajectory case (the FAMA paper's mode) shows,
in the prompt and in the metadata alike, the numbered trajectory, the outcome (failure or timeout)
and who ended the conversation, and nothing else the case holds: not the completed event's cause
either, which the grader wrote by comparing the episode with the ground truth ("final database
differs", "not told to the user: ..."). An informed case adds the cause, the instruction, the
ground-truth actions, the facts to tell the user, the evidence built from them and the
attribution's decisive step.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from faultline._errors import AnswerFormatError, ConfigError
from faultline.core import HELPERS, ChatMessage, LlmRequest, memory_turns, parse_roster
from faultline.services.fama._case import FailureCase
from faultline.services.fama._categories import (
    CATEGORIES,
    CATEGORY_IDS,
    HELPER_FUNCTIONS,
    MAX_MEMORY_TURNS,
    MITIGATION,
    SHORT,
    Category,
    category,
)

ANALYST = """You check a failed conversation between a user and a support agent for one error: {title}.
{definition}
Causes:
{causes}
Reply with one JSON object with exactly these keys:
"verdict": "yes" if the agent made this error, else "no"
"cause": the number of the cause that fits best (0 for no)
"turn": the [number] of the trajectory line with the error (-1 for none)
"recovered": true if the agent put the error right later, else false
"rationale": why, in one short sentence"""

ORCHESTRATOR = """Four analysts checked a failed conversation of a support agent, one error category each.
Name the categories that made the task fail; an error the agent put right later is not one.
Categories: {categories}.
Reply with one JSON object with exactly these keys:
"main": the list of the ids of the categories that made the task fail, most important first
"recovered": the list of the ids of the categories of errors the agent put right later
"rationale": why, in one short sentence"""

MITIGATION_PROMPT = """Choose the fewest helpers that prevent the errors named. Helpers:
{helpers}
Reply with one JSON object with exactly these keys:
"helpers": the list of the names of the helpers chosen (memory as memory:K, K its number of turns)
"rationale": why, in one short sentence"""


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


_ENDED_BY = {"agent": "the agent", "user": "the user", "limit": "a turn or time limit"}


def _case_text(case: FailureCase) -> str:
    if case.analysts == "trajectory":
        return _trajectory_text(case)
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


def _trajectory_text(case: FailureCase) -> str:
    ended = _ENDED_BY.get(case.evidence.ended_by)
    closing = f"\nThe conversation was ended by {ended}." if ended else ""
    return f"# Trajectory\n{case.transcript()}\n\n# Outcome\n{case.outcome}{closing}"


def _meta(case: FailureCase, stage: str, **more: Any) -> dict[str, Any]:
    if case.analysts == "trajectory":
        shown = {
            "turns": case.trajectory,
            "outcome": case.outcome,
            "ended_by": case.evidence.ended_by,
        }
        return {"sim": "judge", "stage": stage, "analysts": "trajectory", "trajectory": shown, **more}
    evidence = msgspec.to_builtins(case.evidence)
    return {"sim": "judge", "stage": stage, "evidence": evidence, **more}


ANSWER = "Reply with the JSON object only."
"""The user message's last line: a small model follows what it read last."""
RATIONALE_CHARS = 200
"""The longest rationale the answer's schema allows, so that the answer has a bounded length."""
ANSWER_TOKENS = 320
"""Each stage's `max_tokens`: enough for the longest answer its schema allows (a rationale can take one
token per character), so that a server holding the model to the schema always lets it finish."""
_RATIONALE = {"type": "string", "maxLength": RATIONALE_CHARS}


def _object(**properties: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of an object with exactly these properties, in this order."""
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _some(names: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "array", "items": {"enum": list(names)}, "maxItems": len(names)}


def analyst_schema(cat: Category, case: FailureCase) -> dict[str, Any]:
    """An analyst's answer as a JSON schema: servers that take one hold the model to these keys and values."""
    return _object(
        verdict={"enum": ["yes", "no"]},
        cause={"type": "integer", "minimum": 0, "maximum": len(cat.causes)},
        turn={"type": "integer", "minimum": -1, "maximum": max(len(case.trajectory) - 1, -1)},
        recovered={"type": "boolean"},
        rationale=_RATIONALE,
    )


MAIN_SCHEMA = _object(main=_some(CATEGORY_IDS), recovered=_some(CATEGORY_IDS), rationale=_RATIONALE)
MITIGATION_NAMES: tuple[str, ...] = (
    *(h for h in HELPERS if h != "memory"),
    "memory",
    *(f"memory:{k}" for k in range(1, MAX_MEMORY_TURNS + 1)),
)
"""What the mitigation agent may name: each helper, memory bare (the default K) or with its K."""
MITIGATION_SCHEMA = _object(
    helpers={"type": "array", "items": {"enum": list(MITIGATION_NAMES)}, "maxItems": len(HELPERS)},
    rationale=_RATIONALE,
)


def analyst_request(case: FailureCase, cat: Category, role: str) -> LlmRequest:
    causes = "\n".join(f"{i}. {c}" for i, c in enumerate(cat.causes, 1))
    system = ANALYST.format(title=cat.title, definition=cat.definition, causes=causes)
    return LlmRequest(
        role=role,
        messages=[
            ChatMessage(role="system", content=system),
            ChatMessage(
                role="user", content=f"{_case_text(case)}\n\nDid the agent make this error: {cat.title}? {ANSWER}"
            ),
        ],
        temperature=0.0,
        max_tokens=ANSWER_TOKENS,
        metadata=_meta(case, "analyst", category=cat.id),
        response_format="json",
        response_schema=analyst_schema(cat, case),
    )


def orchestrator_request(case: FailureCase, verdicts: list[AnalystVerdict], role: str) -> LlmRequest:
    listing = ", ".join(f"{c.id} ({c.title})" for c in CATEGORIES)
    found = "\n".join(
        f"- {v.category}: {'yes' if v.verdict else 'no'}{' (put right later)' if v.recovered else ''}. {v.rationale}"
        for v in verdicts
    )
    system = ORCHESTRATOR.format(categories=listing)
    return LlmRequest(
        role=role,
        messages=[
            ChatMessage(role="system", content=system),
            ChatMessage(role="user", content=f"{_case_text(case)}\n\n# Analysts' verdicts\n{found}\n\n{ANSWER}"),
        ],
        temperature=0.0,
        max_tokens=ANSWER_TOKENS,
        metadata=_meta(case, "orchestrator", verdicts=[msgspec.to_builtins(v) for v in verdicts]),
        response_format="json",
        response_schema=MAIN_SCHEMA,
    )


def mitigation_request(case: FailureCase, main: MainError, role: str) -> LlmRequest:
    helpers = "\n".join(f"- {name}: {text}" for name, text in HELPER_FUNCTIONS.items())
    named = "\n".join(f"- {c.id}: {c.title}. {c.definition}" for c in CATEGORIES if c.id in main.main)
    return LlmRequest(
        role=role,
        messages=[
            ChatMessage(role="system", content=MITIGATION_PROMPT.format(helpers=helpers)),
            ChatMessage(role="user", content=f"# Errors that made the task fail\n{named}\n\n{ANSWER}"),
        ],
        temperature=0.0,
        max_tokens=ANSWER_TOKENS,
        metadata=_meta(case, "mitigation", main=main.main, pairs={k: list(v) for k, v in MITIGATION.items()}),
        response_format="json",
        response_schema=MITIGATION_SCHEMA,
    )


_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)
_DECODER = json.JSONDecoder()


def _json_object(content: str, stage: str) -> dict[str, Any]:
    """The answer's JSON object: a fenced block's, else the first object that parses, prose around it or not."""
    fenced = _FENCE.search(content)
    text = fenced.group(1) if fenced else content
    start = text.find("{")
    while start != -1:
        try:
            value, _ = _DECODER.raw_decode(text, start)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    raise AnswerFormatError(f"{stage}: the answer is not one JSON object: {content[:200]!r}")


def _names(value: Any) -> Any:
    """A list of names as a model may write it: one string alone is a list of one."""
    return [value] if isinstance(value, str) else value


_VERDICTS = {"yes": True, "no": False, "true": True, "false": False}
_CATEGORY_NAMES = {name: c for c in CATEGORY_IDS for name in (c, SHORT[c].lower(), category(c).title)}
"""What the orchestrator may call a category: its id, its abbreviation or its title, in any case."""


def _category_id(name: str) -> str:
    key = name.strip().lower()
    return _CATEGORY_NAMES.get(key, _CATEGORY_NAMES.get(key.replace(" ", "_").replace("-", "_"), name))


def parse_analyst(content: str, category_id: str, shown: list[str] | None = None) -> AnalystVerdict:
    """An analyst's answer; AnswerFormatError when the verdict is not yes or no or a field has the wrong type.

    `shown` is the evidence the analyst was given, recorded as what it used when the answer does not say.
    """
    data = _json_object(content, f"analyst {category_id}")
    raw = data.get("verdict", "")
    verdict = raw if isinstance(raw, bool) else _VERDICTS.get(raw.strip().lower()) if isinstance(raw, str) else None
    if verdict is None:
        raise AnswerFormatError(f"analyst {category_id}: verdict must be yes or no, got {raw!r}")
    fields = {k: v for k, v in data.items() if k in ("cause", "turn", "recovered", "rationale", "evidence")}
    try:
        return msgspec.convert(
            {"evidence": list(shown or [])} | fields | {"category": category_id, "verdict": verdict},
            AnalystVerdict,
            strict=False,  # "3" for 3, "false" for false
        )
    except msgspec.ValidationError as exc:
        raise AnswerFormatError(f"analyst {category_id}: {exc}: {content[:200]!r}") from None


def parse_main(content: str) -> MainError:
    """The orchestrator's answer; categories outside the four are refused (ids, abbreviations and titles are read)."""
    data = _json_object(content, "orchestrator")
    fields = {k: v for k, v in data.items() if k in MainError.__struct_fields__}
    named = {k: _names(fields[k]) for k in ("main", "recovered") if k in fields}
    try:
        found = msgspec.convert(fields | named, MainError)
    except msgspec.ValidationError as exc:
        raise AnswerFormatError(f"orchestrator: {exc}: {content[:200]!r}") from None
    found = MainError(  # each category once: SmolLM2-135M named one four times over
        main=list(dict.fromkeys(_category_id(c) for c in found.main)),
        recovered=list(dict.fromkeys(_category_id(c) for c in found.recovered)),
        rationale=found.rationale,
    )
    unknown = [c for c in [*found.main, *found.recovered] if c not in CATEGORY_IDS]
    if unknown:
        raise AnswerFormatError(
            f"orchestrator: unknown categories {unknown}; use {', '.join(CATEGORY_IDS)}: {content[:200]!r}"
        )
    return found


def parse_mitigation(content: str) -> Mitigation:
    """The mitigation agent's answer, its helpers as a canonical roster; `memory:K` keeps the K it
    chose (1 to `MAX_MEMORY_TURNS`), a bare `memory` the default."""
    data = _json_object(content, "mitigation")
    helpers = _names(data.get("helpers"))
    if not isinstance(helpers, list) or not all(isinstance(h, str) for h in helpers):
        raise AnswerFormatError(
            f"mitigation: helpers must be a list of names from {', '.join(HELPERS)}: {content[:200]!r}"
        )
    entries = [_entry(h) for h in helpers]
    for entry in entries:
        _check_memory_turns(entry)
    try:
        roster = parse_roster(entries)
    except ConfigError as exc:
        raise AnswerFormatError(f"mitigation: {exc}") from None
    return Mitigation(helpers=roster, rationale=str(data.get("rationale", "")))


def _entry(name: str) -> str:
    """A helper as a model may write it (`Memory : 2`) in roster spelling (`memory:2`)."""
    helper, colon, k = name.strip().lower().partition(":")
    return f"{helper.strip()}{colon}{k.strip()}"


def _check_memory_turns(entry: str) -> None:
    """AnswerFormatError unless a `memory:K` entry's K is a whole number from 1 to `MAX_MEMORY_TURNS`."""
    name, colon, k = entry.partition(":")
    if name != "memory" or not colon:
        return
    if not (k.isdigit() and 1 <= int(k) <= MAX_MEMORY_TURNS):
        raise AnswerFormatError(
            f"mitigation: {entry!r}: memory:K keeps the user's last K turns, K a whole number from 1 to "
            f"{MAX_MEMORY_TURNS} (or memory alone for {memory_turns('memory')})"
        )
