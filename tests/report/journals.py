"""Hand-made episodes for the report's tests: the messages a detector reads, nothing else."""

from __future__ import annotations

from pathlib import Path

import msgspec

from faultline.core import (
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    FaultApplied,
    MessageBody,
    UserTurn,
    derive_id,
)
from faultline.journal import Journal
from tests.journal.conftest import incoming

Step = tuple[str, str, MessageBody] | tuple[str, str, MessageBody, str]
"""(sender, recipient, body) or (sender, recipient, body, causation)."""


def faulted(original: str, *results: str, fault: str = "storm") -> FaultApplied:
    """A fault event that replaced message `original` by messages `results`."""
    return FaultApplied(rule_id="r1", fault=fault, original={"id": original}, results=[{"id": r} for r in results])


def addressed(original: str, sender: str, recipient: str, *results: tuple[str, str], fault: str) -> FaultApplied:
    """A fault event as the runtime writes it, with whole envelopes: message `original` from `sender` to `recipient`
    replaced by `results`, each (id, the agent it went to)."""
    sent = Envelope(id=original, episode="x", sender=sender, recipient=recipient, body=UserTurn(text="Hello."))
    out = [msgspec.to_builtins(msgspec.structs.replace(sent, id=i, recipient=to)) for i, to in results]
    return FaultApplied(rule_id="r1", fault=fault, original=msgspec.to_builtins(sent), results=out)


def episode(
    name: str, task: str, steps: list[Step], *, outcome: str = "success", trial: int = 0, run: str = ""
) -> list[Envelope]:
    """An episode: started (its start recording `run`), `steps` (ids m1, m2, ... in order), completed with
    `outcome`."""
    bodies: list[Step] = [
        ("runner", "", EpisodeStarted(domain="retail", task=task, trial=trial, run=run)),
        *steps,
        ("runner", "", EpisodeCompleted(outcome=outcome)),  # type: ignore[arg-type]
    ]
    return [
        Envelope(
            id=f"m{i}" if 0 < i < len(bodies) - 1 else derive_id(name, i),
            episode=name,
            sender=step[0],
            recipient=step[1],
            body=step[2],
            causation=step[3] if len(step) > 3 else "",  # type: ignore[misc]
            ts=1_767_225_600.0 + i,
        )
        for i, step in enumerate(bodies)
    ]


def write_journal(path: Path, *episodes: list[Envelope]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    envelopes = [env for e in episodes for env in e]
    with Journal.open(path) as journal:
        journal.append(incoming(envelopes))
    return path
