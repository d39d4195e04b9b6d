"""The simulator's stand-in for the behaviour annotator's judge: labels from what the request shows.

A SIMULATION for exercising the judged report (its request, answer format, recordings and counts),
never a result about models. The answer is a pure function of `request.metadata`, which the
annotator fills with exactly what its prompt shows (`faultline.report`): the trajectory as the
agents saw it, the faults as what they injected, the rule detectors' sightings. Nothing else of the
episode reaches it, neither the simulator's mistake labels nor the grader's outcome.

    evidence                      behaviour (tiers)                                    succeeded when
    defense_filtered              system filters the faulted message (rule)            the drop was a faulted one
                                                                                       whose message still arrived;
                                                                                       a faulted one it did not:
                                                                                       "drops the faulted message,
                                                                                       which never arrives"
    tool_error_corrected          agent identifies and corrects the call               the next call succeeded;
                                  (mechanism, reasoning)                               else mechanism succeeded
                                                                                       (the retry ran), reasoning
                                                                                       failed
    asked_user                    asks the user for key information                    the user answered
                                  (mechanism, reasoning)
    verifier_recheck              verifier sends the call back (mechanism)             the next result is no error
    helper_restored               helper restores the missing context (mechanism)     always
    acted_on_copy                 duplicates cause abnormal behaviour                  never
                                  (rule, reasoning)
    echo_received                 receives cyclic messages without impact              in reasoning, where the
                                  (rule, reasoning)                                    sighting repaired there;
                                                                                       else "cyclic message stalls
                                                                                       the conversation"
    trajectory: a fault delivered copies no defense dropped and no agent acted on (no acted_on_copy sighting):
      "duplicates do not affect behaviour" (reasoning, succeeded)
    trajectory: a fault changed an agent's start (its prompt): "follows its original role" (prompt),
      succeeded when none of that agent's later tool calls failed, else "disturbed by the changed prompt"
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from faultline.core import LlmRequest, LlmResponse
from faultline.runtime.models._sim_judge import json_answer

FROM_EVIDENCE: dict[str, tuple[str, str, list[str], list[str]]] = {
    "defense_filtered": ("system filters the faulted message", "system filters a stray message", ["rule"], []),
    "tool_error_corrected": (
        "agent identifies and corrects the call",
        "responds to the error but ultimately fails",
        ["mechanism", "reasoning"],
        ["mechanism"],
    ),
    "asked_user": (
        "asks the user for key information",
        "asks the user but gets no answer",
        ["mechanism", "reasoning"],
        [],
    ),
    "verifier_recheck": ("verifier sends the call back", "verifier sends the call back in vain", ["mechanism"], []),
    "helper_restored": (
        "helper restores the missing context",
        "helper restores the missing context",
        ["mechanism"],
        [],
    ),
    "acted_on_copy": (
        "duplicates cause abnormal behaviour",
        "duplicates cause abnormal behaviour",
        ["rule", "reasoning"],
        [],
    ),
    "echo_received": (
        "receives cyclic messages without impact",
        "cyclic message stalls the conversation",
        ["rule", "reasoning"],
        [],
    ),
}
"""Per rule detector: the behaviour's name when it succeeded, when it failed, its tiers, and those of its tiers
that still succeed when it fails (MAS-FIRE's "responds to the error but ultimately fails": ✓ mechanism,
✗ reasoning)."""
LOST_IN_DROP = "system drops the faulted message, which never arrives"
"""`defense_filtered` not repaired on a message a fault sent: the defense dropped what the fault sent elsewhere (a
cycle's echo), and the recipient never got the message."""


def respond_annotator(request: LlmRequest, words: int) -> LlmResponse:
    """The simulated annotation of one episode; `words` is the prompt's size for the usage counts."""
    meta = request.metadata
    trajectory: list[dict[str, Any]] = list(meta.get("trajectory") or [])
    faults: list[dict[str, Any]] = list(meta.get("faults") or [])
    evidence: list[dict[str, Any]] = list(meta.get("evidence") or [])
    lost = {e["n"] for e in trajectory if e.get("kind") == "defense_fired" and e.get("dropped_faulted")}
    behaviours = [_from_evidence(e, lost) for e in evidence]
    if not any(e.get("behaviour") == "acted_on_copy" for e in evidence):
        behaviours += _unaffected(trajectory, faults)
    behaviours += _prompts(trajectory, faults)
    behaviours.sort(key=lambda b: (b["step"], b["name"]))
    answer = {"behaviours": behaviours, "rationale": f"{len(behaviours)} responses to the injected faults"}
    return json_answer(answer, words, "annotator")


def _behaviour(name: str, tiers: list[str], succeeded: bool, step: int, kept: Collection[str] = ()) -> dict[str, Any]:
    outcomes = {tier: "succeeded" if succeeded or tier in kept else "failed" for tier in tiers}
    return {"name": name, "tiers": outcomes, "step": step}


def _from_evidence(sighting: dict[str, Any], lost: Collection[int] = ()) -> dict[str, Any]:
    """The behaviour one sighting stands for; `lost`: the trajectory's [numbers] of defense drops of a faulted
    message, which, when the sighting says it repaired nothing, left its recipient without the message."""
    behaviour = str(sighting.get("behaviour"))
    good, bad, tiers, kept = FROM_EVIDENCE.get(
        behaviour, ("responds to the fault", "responds to the fault", ["mechanism"], [])
    )
    repaired = bool(sighting.get("repaired"))
    if behaviour == "defense_filtered" and sighting.get("n") in lost:
        bad = LOST_IN_DROP
    if failed_in := sighting.get("failed_in"):  # repaired in the tiers it did not fail in
        return _behaviour(good, tiers, False, int(sighting.get("n", -1)), [t for t in tiers if t not in failed_in])
    return _behaviour(good if repaired else bad, tiers, repaired, int(sighting.get("n", -1)), kept)


def _unaffected(trajectory: list[dict[str, Any]], faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies a fault delivered beside the message (a storm, a broadcast) that no defense dropped, in an episode
    where the detectors saw no agent act on one: the duplicates did not affect behaviour."""
    dropped = {int(e.get("dropped") or 0) for e in trajectory if e.get("kind") == "defense_fired"}
    found = []
    for fault in faults:
        copies = [n for n in fault.get("delivered", [])[1:] if n not in dropped]
        if copies:
            found.append(_behaviour("duplicates do not affect behaviour", ["reasoning"], True, copies[0]))
    return found


def _prompts(trajectory: list[dict[str, Any]], faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A start a fault rewrote for an agent other than the user: its prompt changed."""
    by_n = {e["n"]: e for e in trajectory}
    found = []
    for fault in faults:
        starts = [by_n[n] for n in fault.get("delivered", []) if by_n.get(n, {}).get("kind") == "start"]
        for start in starts:
            agent = start.get("recipient", "")
            if agent in ("", "user"):
                continue
            calls = {e["n"] for e in trajectory if e["n"] > start["n"] and e.get("sender") == agent}
            errors = [e["n"] for e in trajectory if e.get("kind") == "tool_result" and e.get("error")
                      and e.get("cause") in calls]  # fmt: skip
            name = "disturbed by the changed prompt" if errors else "follows its original role"
            found.append(_behaviour(name, ["prompt"], not errors, errors[0] if errors else start["n"]))
    return found
