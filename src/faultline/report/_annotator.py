"""Judged behaviours: a model reads one faulted episode and labels the fault-tolerant behaviours it sees.

MAS-FIRE annotates each faulted trace with a model judge; this is that annotator. It is shown the
episode's messages as the agents saw them (what the faults delivered, not what was sent), the faults
as what they injected, and the rule detectors' sightings as cheap evidence; never the simulator's
own mistake labels (`tally`), the grader's outcome, or a model's recorded answers. It answers one
JSON object (`ANSWER_FORMAT`): each behaviour's short name and its tiers (several allowed), each with
whether it succeeded there (the fault was mitigated) or failed (activated, did not resolve it): as in
MAS-FIRE's Table 2, one behaviour may succeed in one tier and fail in another. An answer in any
other form is an `AnswerFormatError` that names the path, and the episode is reported as not
annotated with that reason.

The request also carries what the prompt shows as `metadata` (`sim` "annotator"), which real
backends ignore and the offline stand-in reads. The annotator is an agent that asks through
`ctx.llm`, so its calls are recordings; `annotate_episodes` keeps them in the campaign folder
(`ANNOTATIONS`) and serves a recorded answer again when the same judge is asked the same request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from faultline._errors import AnswerFormatError, FaultlineError
from faultline._files import write_atomically
from faultline.core import (
    Agent,
    AgentHarness,
    AssistantTurn,
    ChatMessage,
    Context,
    ContextReply,
    ContextRequest,
    DefenseFired,
    Envelope,
    FaultApplied,
    LlmRequest,
    ModelBackend,
    Note,
    Notice,
    Recorder,
    Recording,
    Start,
    ToolCall,
    ToolResult,
    UserTurn,
    derive_id,
    digest,
    encode,
)
from faultline.report._behaviours import TIERS, Behaviour, Tier, detect, removed_texts

ROLE = "judge"
"""The model role the annotator asks."""
ANNOTATIONS = "annotations.jsonl"
"""The judge's recorded answers, one line per faulted episode, in the campaign folder."""
SHOWN_KINDS = (
    "start", "user_turn", "assistant_turn", "tool_call", "tool_result", "context_request", "context_reply",
    "defense_fired", "fault_applied",
)  # fmt: skip
"""The rows the annotator is shown; not tallies, completions or recordings (labels and answers)."""
MAX_SHOWN_CHARS = 400
"""How much of one message's text the trajectory shows."""
ANSWER_TOKENS = 768
MAX_BEHAVIOURS = 8
"""The most behaviours one answer lists: bounded in the schema too, so that a model whose output the schema
constrains must close the list (a small one otherwise repeats items until its token cap)."""
MAX_NAME_CHARS = 80
ANNOTATED = "annotated"
NOT_ANNOTATED = "not_annotated"

SYSTEM = """You annotate the fault-tolerant behaviours of a multi-agent system in one episode where faults were \
injected. A fault-tolerant behaviour is how the system or an agent responded to a fault. Its tiers:
mechanism: the system's structure (retries, critique or verifier loops, helpers, a channel to ask the user)
rule: explicit programmed logic (filters that drop duplicate or stray messages, format checks)
prompt: the agent kept to what its prompt says (its role, its instructions) despite the fault
reasoning: the agent's own understanding (noticing an inconsistency, inferring missing context, ignoring noise)
A behaviour may belong to several tiers, with an outcome in each: it succeeded in a tier when that tier's \
response mitigated the fault, failed when it was activated there but did not resolve it (for example, a retry \
that ran (mechanism, succeeded) with an agent that then gave up (reasoning, failed)). List no behaviour when \
the system did not respond to the fault.
Reply with one JSON object with exactly these keys:
"behaviours": a list of at most 8 objects, one per distinct behaviour, with keys "name" (a short description \
of what the system did), "tiers" (an object whose keys are \
tiers above and whose values are "succeeded" or "failed"), "step" (the [number] of the trajectory line that \
shows it)
"rationale": why, in one short sentence"""

Outcome = Literal["succeeded", "failed"]


class JudgedBehaviour(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One behaviour in the judge's answer."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS)]
    tiers: Annotated[dict[Tier, Outcome], msgspec.Meta(min_length=1)]
    """Each tier it belongs to, with its outcome there."""
    step: int = -1


class Annotation(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The judge's answer for one episode (`ANSWER_FORMAT`)."""

    behaviours: Annotated[list[JudgedBehaviour], msgspec.Meta(max_length=MAX_BEHAVIOURS)]
    rationale: str = ""


ANSWER_FORMAT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "behaviours": {
            "type": "array",
            "maxItems": MAX_BEHAVIOURS,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS},
                    "tiers": {
                        "type": "object",
                        "properties": {tier: {"enum": ["succeeded", "failed"]} for tier in TIERS},
                        "additionalProperties": False,
                        "minProperties": 1,
                    },
                    "step": {"type": "integer"},
                },
                "required": ["name", "tiers", "step"],
                "additionalProperties": False,
            },
        },
        "rationale": {"type": "string", "maxLength": 300},
    },
    "required": ["behaviours", "rationale"],
    "additionalProperties": False,
}
"""The answer's JSON schema, sent as the request's `response_schema`."""

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n?```\s*$", re.DOTALL)


def parse_annotation(content: str) -> Annotation:
    """The judge's answer: one JSON object of `ANSWER_FORMAT` (a ```json fence around it allowed, nothing else).
    Anything else raises `AnswerFormatError` saying what is wrong and where."""
    fenced = _FENCE.match(content)
    text = fenced.group(1) if fenced else content
    try:
        return msgspec.json.decode(text.strip().encode(), type=Annotation)
    except msgspec.ValidationError as exc:
        raise AnswerFormatError(f"annotation: {exc}: {content[:200]!r}") from None
    except msgspec.DecodeError as exc:
        raise AnswerFormatError(f"annotation: not one JSON object ({exc}): {content[:200]!r}") from None


class EpisodeCase(msgspec.Struct, frozen=True, kw_only=True):
    """What the annotator is shown of one faulted episode, and where its lines sit in the journal."""

    episode: str
    task: str
    trial: int
    trajectory: list[dict[str, Any]]
    """One entry per shown message: `n` (its [number]), sender, recipient, kind, text, `cause` (the [number]
    of the message its sender was handling, 0 if not shown), `faulted` (a fault delivered it) and per kind:
    tool, error, helper, verdict, `dropped` (a defense's dropped message's [number]), `dropped_faulted`."""
    faults: list[dict[str, Any]]
    """Per applied fault: `n`, fault, `delivered` (the [numbers] of what it sent instead), `agent` whose message
    or model call it changed, `on_model_call`, `removed` (text it took out of a conversation)."""
    evidence: list[dict[str, Any]]
    """The rule detectors' sightings: behaviour, tier (its tiers, comma-separated, when more than one), `n`,
    repaired, and `failed_in`: the tiers it failed in where it repaired the fault in the others."""
    positions: list[int]
    """The journal position of each [number], from 1."""

    def position(self, n: int) -> int:
        return self.positions[n - 1] if 0 < n <= len(self.positions) else 0


def _short(text: Any) -> str:
    text = text if isinstance(text, str) else json.dumps(text, sort_keys=True, default=str)
    assert isinstance(text, str)
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 3] + "..."


def _entry(n: int, env: Envelope, numbers: Mapping[str, int], delivered: set[str], made: set[str]) -> dict[str, Any]:
    body = env.body
    entry: dict[str, Any] = {
        "n": n, "sender": env.sender, "recipient": env.recipient, "kind": env.kind, "text": "",
        "cause": numbers.get(env.causation, 0), "faulted": env.id in delivered,
    }  # fmt: skip
    match body:
        case Start() | UserTurn() | AssistantTurn():
            entry["text"] = _short(body.text)
        case ToolCall():
            entry |= {"tool": body.name, "text": _short(body.arguments), "error": body.injected_error}
        case ToolResult():
            entry |= {"tool": body.name, "text": _short(body.output) if not body.error else "", "error": body.error}
        case ContextRequest():
            entry |= {"helper": ",".join(body.helpers), "text": _short(body.proposal) if body.proposal else ""}
        case ContextReply():
            entry |= {"helper": body.helper, "verdict": body.verdict, "text": _short(body.text)}
        case DefenseFired():
            dropped = numbers.get(body.message_id, 0)
            entry |= {"helper": body.defense, "text": body.reason, "dropped": dropped}
            entry["dropped_faulted"] = body.message_id in made
    return entry


def episode_case(
    episode: str, task: str, trial: int, steps: list[tuple[int, Envelope]], baseline: Iterable[str] = ()
) -> EpisodeCase:
    """The case of one episode from its (position, envelope) steps (the rule detectors see the same steps, read
    against `baseline`, what the fault-free run of the same unit did: see `detect`)."""
    shown = [(pos, env) for pos, env in steps if env.kind in SHOWN_KINDS]
    numbers = {env.id: n for n, (_, env) in enumerate(shown, 1)}
    made = {str(r.get("id", "")) for _, env in shown if isinstance(env.body, FaultApplied) for r in env.body.results}
    trajectory: list[dict[str, Any]] = []
    faults: list[dict[str, Any]] = []
    for n, (_, env) in enumerate(shown, 1):
        body = env.body
        if isinstance(body, FaultApplied):
            faults.append({
                "n": n, "fault": body.fault, "on_model_call": body.model_call >= 0,
                "agent": str(body.original.get("sender", "")),
                "delivered": [numbers[i] for r in body.results if (i := str(r.get("id", ""))) in numbers],
                "removed": [_short(t) for t in removed_texts(body)],
            })  # fmt: skip
            trajectory.append({"n": n, "sender": env.sender, "recipient": "", "kind": env.kind, "text": body.fault,
                               "cause": numbers.get(env.causation, 0), "faulted": False})  # fmt: skip
        else:
            trajectory.append(_entry(n, env, numbers, made, made))
    position = {pos: n for n, (pos, _) in enumerate(shown, 1)}
    evidence = [
        {
            "behaviour": b.name,
            "tier": ", ".join(b.all_tiers),
            "n": _line_at(position, b.pos),
            "repaired": b.repaired,
            "failed_in": b.failed_in,
        }
        for b in detect(steps, baseline=baseline)
    ]
    return EpisodeCase(
        episode=episode,
        task=task,
        trial=trial,
        trajectory=trajectory,
        faults=faults,
        evidence=evidence,
        positions=[pos for pos, _ in shown],
    )


def _outcome(sighting: dict[str, Any]) -> str:
    if sighting["repaired"]:
        return "repaired"
    failed_in = sighting.get("failed_in") or []
    return f"not repaired in {', '.join(failed_in)}, repaired in the others" if failed_in else "not repaired"


def _line_at(position: Mapping[int, int], pos: int) -> int:
    return position.get(pos, 0)


def trajectory_text(case: EpisodeCase) -> str:
    """The numbered trajectory, the faults and the evidence, as the prompt shows them."""
    lines = []
    for e in case.trajectory:
        head = f"[{e['n']}] {e['sender']}" + (f" -> {e['recipient']}" if e["recipient"] else "") + f" {e['kind']}"
        extra = [f"{k}: {e[k]}" for k in ("tool", "helper", "verdict") if e.get(k)]
        extra += [f"answering [{e['cause']}]"] if e["cause"] else []
        extra += ["delivered by a fault"] if e["faulted"] else []
        extra += [f"dropped [{e['dropped']}]"] if e.get("dropped") else []
        error = f" ERROR: {e['error']}" if e.get("error") else ""
        lines.append(f"{head} ({'; '.join(extra)}): {e['text']}{error}" if extra else f"{head}: {e['text']}{error}")
    faults = [
        f"- [{f['n']}] {f['fault']} on {'a model request' if f['on_model_call'] else 'a message'} of"
        f" {f['agent'] or 'the runtime'}; delivered: {', '.join(f'[{d}]' for d in f['delivered']) or 'nothing'}"
        + (f"; removed: {' | '.join(f['removed'])}" if f["removed"] else "")
        for f in case.faults
    ]
    evidence = [f"- [{v['n']}] {v['behaviour']} ({v['tier']}, {_outcome(v)})" for v in case.evidence]
    return (
        "# Trajectory\n" + "\n".join(lines) + "\n\n# Faults injected\n" + ("\n".join(faults) or "- (none)")
        + "\n\n# Rule detectors' sightings (cheap evidence; may miss behaviours or be wrong)\n"
        + ("\n".join(evidence) or "- (none)")
    )  # fmt: skip


def annotation_request(case: EpisodeCase, role: str = ROLE) -> LlmRequest:
    """What the annotator asks its judge about one episode."""
    return LlmRequest(
        role=role,
        messages=[
            ChatMessage(role="system", content=SYSTEM),
            ChatMessage(role="user", content=f"{trajectory_text(case)}\n\nAnnotate the fault-tolerant behaviours."),
        ],
        temperature=0.0,
        max_tokens=ANSWER_TOKENS,
        metadata={"sim": "annotator", "trajectory": case.trajectory, "faults": case.faults, "evidence": case.evidence},
        response_format="json",
        response_schema=ANSWER_FORMAT,
    )


class BehaviourAnnotator(Agent):
    """Labels the behaviours of each episode case it is handed (a `Note` "case"), through `ctx.llm`; emits a
    `Notice` "annotated" with the annotation, or "not_annotated" with the reason."""

    name: ClassVar[str] = "annotator"
    CASE: ClassVar[str] = "case"

    def __init__(self, role: str = ROLE) -> None:
        self.role = role

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        body = msg.body
        if not (isinstance(body, Note) and body.text == self.CASE):
            return
        case = msgspec.convert(body.data, EpisodeCase)
        try:
            answer = await ctx.llm(annotation_request(case, self.role))
            annotation = parse_annotation(answer.content)
        except FaultlineError as exc:
            ctx.emit(
                Notice(text=NOT_ANNOTATED, data={"episode": case.episode, "error": f"{type(exc).__name__}: {exc}"})
            )
            return
        ctx.emit(Notice(text=ANNOTATED, data={"episode": case.episode, "annotation": msgspec.to_builtins(annotation)}))


class RecordedAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """One line of `ANNOTATIONS`: which judge was asked what about an episode, and its recorded call."""

    episode: str
    judge: str
    recording: Recording


def read_recorded(folder: Path) -> dict[str, RecordedAnswer]:
    path = folder / ANNOTATIONS
    if not path.exists():
        return {}
    decoder = msgspec.json.Decoder(RecordedAnswer)
    found = (decoder.decode(line) for line in path.read_bytes().splitlines() if line.strip())
    return {r.episode: r for r in found}


Judged = dict[str, Annotation | str]
"""Per faulted episode, the judge's annotation or why there is none."""


async def annotate_episodes(
    cases: list[EpisodeCase], backend: ModelBackend, *, judge: str, role: str = ROLE, folder: Path | None = None
) -> tuple[Judged, int]:
    """Each case annotated by a `BehaviourAnnotator` asking `backend` as model role `role`, and how many answers
    were served from the recorded ones. With `folder`, an answer recorded there for the same episode, `judge` (which
    backend and model) and request is served again, and every answer of this run is written back; an answer that
    did not arrive (a model error) is not recorded, so a rerun asks again."""
    recorded = read_recorded(folder) if folder is not None else {}
    annotator = BehaviourAnnotator(role)
    harness = AgentHarness(annotator, episode="annotator", backend=backend)
    kept: dict[str, RecordedAnswer] = dict(recorded)
    judged: Judged = {}
    served = 0
    for case in cases:
        message = Envelope(
            id=derive_id(case.episode, 0, "annotate"), episode=case.episode, sender="report",
            recipient=annotator.name, body=Note(text=BehaviourAnnotator.CASE, data=msgspec.to_builtins(case)),
        )  # fmt: skip
        old = recorded.get(case.episode)
        digest_now = digest(encode(annotation_request(case, role)))
        reuse = old is not None and old.judge == judge and old.recording.request_digest == digest_now
        recorder = Recorder(recorded={0: old.recording} if reuse and old else {}, services=harness)
        ctx = Context(agent=annotator.name, message=message, recorder=recorder, services=harness)
        await annotator.on_message(message, ctx)
        served += reuse
        for output in ctx.outputs:
            notice = output.body
            if isinstance(notice, Notice) and notice.text == ANNOTATED:
                judged[case.episode] = msgspec.convert(notice.data["annotation"], Annotation)
            elif isinstance(notice, Notice):
                judged[case.episode] = str(notice.data.get("error", ""))
        made = [r for r in recorder.made if r.call == "llm" and not r.error]
        if made:
            kept[case.episode] = RecordedAnswer(episode=case.episode, judge=judge, recording=made[0])
        else:
            kept.pop(case.episode, None)
    if folder is not None:
        write_atomically(folder / ANNOTATIONS, b"".join(msgspec.json.encode(r) + b"\n" for r in kept.values()))
    return judged, served


def judged_behaviours(case: EpisodeCase, annotation: Annotation, fault_pos: int) -> list[Behaviour]:
    """The annotation's behaviours as the report counts them; one without a shown step sits at the first fault."""
    found = []
    for b in annotation.behaviours:
        tiers = list(b.tiers)
        failed = [tier for tier in tiers if b.tiers[tier] == "failed"]
        found.append(
            Behaviour(
                name=b.name.strip().lower(),
                tier=tiers[0],
                tiers=tiers,
                pos=case.position(b.step) or fault_pos,
                repaired=not failed,
                failed_in=failed if len(failed) < len(tiers) else [],
            )
        )
    return found
