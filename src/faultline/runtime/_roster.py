"""The live roster on `fl.ctl.helpers`: which helpers new episodes of a domain take.

It maps a domain, and optionally a model, to a roster (`faultline.core.parse_roster`);
it is a fold of the `Control` messages on `fl.ctl.helpers`, so it is journaled and
any process rebuilds it by reading that subject from the stream.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import msgspec

from faultline._errors import ConfigError, NoResponderError, ReplyTimeoutError
from faultline.bus import Bus, Message, decode_notice, hear
from faultline.core import CONTROL_EPISODE, OPERATOR, Control, Envelope, derive_id, parse_roster

HELPERS_CONTROL = "helpers"
"""The control name of the roster: it travels on `fl.ctl.helpers`."""
ANY_MODEL = "*"
"""The model key of a roster that applies whatever model the tool agent uses."""
READ_TIMEOUT_S = 5.0
TAKEN = "taken"
"""What the helper pool tells of each roster change it took in (`fl.svc.helpers.<its user>.taken`)."""


class PoolState(msgspec.Struct, kw_only=True):
    """What the pool says of itself: the last roster control it took in, the helper agents it serves."""

    control: str = ""
    served: list[str] = []


class Rosters(msgspec.Struct, kw_only=True):
    """The live roster: for each domain, a roster per model name (`*`: any model), and the counts a
    roster was chosen by when the FAMA controller chose it (`reasons`, same keys)."""

    domains: dict[str, dict[str, list[str]]] = {}
    reasons: dict[str, dict[str, dict[str, Any]]] = {}

    def take(self, control: Control) -> None:
        """Fold one `fl.ctl.helpers` control in: `set` a (domain, model) roster, or `clear` one domain or all.

        A malformed one, or one that names helpers there are not, is ignored: the helper pool that served its
        roster failed on it, and again at every restart, since it reads every control from the stream's start."""
        try:
            command = msgspec.convert(control.data, _RosterCommand)
            parse_roster(command.helpers)
        except (msgspec.ValidationError, ConfigError):
            return
        domain, model = command.domain, command.model or ANY_MODEL
        if command.action == "set" and domain:
            self.domains.setdefault(domain, {})[model] = command.helpers
            reasons = self.reasons.setdefault(domain, {})
            if command.counts is not None:
                reasons[model] = command.counts
            else:
                reasons.pop(model, None)
        elif command.action == "clear":
            if not domain:
                self.domains.clear()
                self.reasons.clear()
            else:
                self.domains.pop(domain, None)
                self.reasons.pop(domain, None)

    def for_episode(self, domain: str, model: str = "") -> list[str]:
        """The roster a new episode of `domain` with the tool agent's `model` takes."""
        by_model = self.domains.get(domain, {})
        return list(by_model.get(model, by_model.get(ANY_MODEL, [])))

    def entries(self) -> set[str]:
        """Every entry some roster names."""
        return {entry for rosters in self.domains.values() for roster in rosters.values() for entry in roster}


class _RosterCommand(msgspec.Struct):
    """The data of a `fl.ctl.helpers` control, as `roster_control` writes it."""

    action: str = ""
    domain: str = ""
    model: str | None = None
    helpers: list[str] = []
    counts: dict[str, Any] | None = None


def roster_control(
    action: str,
    *,
    domain: str = "",
    model: str = "",
    helpers: list[str] | None = None,
    nonce: str = "",
    counts: dict[str, Any] | None = None,
) -> Envelope:
    """The control message that sets or clears a roster, from the operator.

    Its id derives from `nonce` (default: the time), so a caller that sends the same decision again
    (a redelivered event) gives the same id, and the stream keeps one copy. `counts` say why (the
    FAMA controller's failure counts); the roster itself ignores them."""
    data: dict[str, Any] = {"action": action, "domain": domain, "model": model or ANY_MODEL}
    if helpers is not None:
        data["helpers"] = helpers
    if counts is not None:
        data["counts"] = counts
    nonce = nonce or f"{time.time_ns()}"
    return Envelope(
        id=derive_id(f"{HELPERS_CONTROL}/{nonce}", 0, "c"),
        episode=CONTROL_EPISODE,
        sender=OPERATOR,
        body=Control(name=HELPERS_CONTROL, data=data),
        ts=time.time(),
    )


async def read_rosters(bus: Bus, timeout_s: float = READ_TIMEOUT_S) -> Rosters:
    """The live roster, read from the stream's `fl.ctl.helpers` messages."""
    rosters = Rosters()
    for _, env in await bus.read_envelopes([bus.subjects.ctl(HELPERS_CONTROL)], timeout_s):
        if isinstance(env.body, Control):
            rosters.take(env.body)
    return rosters


async def publish_roster(bus: Bus, control: Envelope, timeout_s: float) -> tuple[PoolState | None, float]:
    """Publish a roster control and wait for a running system to take it in.

    Returns that system's announcement (`served`: the helper agents it runs now) and the
    seconds it took, or None when none answered within `timeout_s` (the control is
    journaled all the same, and a system started later reads it).
    """
    taken = anyio.Event()
    answer = PoolState()

    async def on_note(_: str, msg: Message) -> None:
        nonlocal answer
        note = decode_notice(msg.data, PoolState, subject=msg.subject)
        if note is not None and note.control == control.id:
            answer = note
            taken.set()

    sub = await hear(bus, HELPERS_CONTROL, TAKEN, on_note)
    try:
        started = anyio.current_time()
        await bus.publish(control)
        with anyio.move_on_after(timeout_s):
            await taken.wait()
        return (answer if taken.is_set() else None), anyio.current_time() - started
    finally:
        await sub.unsubscribe()


async def helpers_served(bus: Bus, timeout_s: float) -> list[str] | None:
    """The helper agents the running system serves now, as its helper pool says; None when none answers (no `up`
    follows the roster) or its answer cannot be read."""
    try:
        answer = await bus.request(bus.subjects.svc(HELPERS_CONTROL), b"", timeout_s)
    except (NoResponderError, ReplyTimeoutError):
        return None
    state = decode_notice(answer, PoolState, subject="an answer about the helpers served")
    return state.served if state is not None else None
