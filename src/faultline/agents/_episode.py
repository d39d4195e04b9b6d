"""What every agent of an episode is told at the start, and what they hand the environment at the end."""

from __future__ import annotations

from typing import Any

import msgspec

from faultline.core import Body, ConversationEnded, Note, Start, Tally


class EpisodeSpec(msgspec.Struct, frozen=True, kw_only=True):
    """The `Start.data` the runner sends to `env`, `tool` and `user`.

    `error_rates`, `repair_from_decision` and `sample` only steer the offline
    simulator; real models ignore them. `repair_from_decision` (set by attribution
    forks of earlier versions, kept so their journals replay) switches the
    simulator's mistakes off from that tool-agent decision on. `sample` (set by the
    sampled counterfactuals of attribution) asks for another draw of the
    simulator's randomness from decision `sample_from[agent]` of each agent on,
    as a real model's sampling gives one. Both leave earlier requests unchanged,
    so a fork's history still replays.
    `helpers` is the episode's roster (`faultline.runtime.parse_roster`), taken when it
    starts and kept to its end; the `helper_*`, `verifier_revisions` and `tor_threshold`
    settings say how the tool agent and the helpers work with it.
    """

    domain: str
    task: str
    seed: int = 0
    trial: int = 0
    max_turns: int = 30
    max_steps: int = 60
    tool_role: str = "tool"
    user_role: str = "user"
    error_rates: dict[str, float] = {}
    repair_from_decision: int | None = None
    sample: int = 0
    sample_from: dict[str, int] = {}
    helpers: list[str] = []
    memory: dict[str, Any] = {}
    tool_calls: str = "native"
    """How the tool agent offers tools to its model: "native" (OpenAI `tools`) or "text"."""
    reflection: str = "off"
    """"after_error": after a failed tool call the tool agent asks its model to answer in the structured
    reflection form (`<reflect>`, then `<call>` or `<final>`), as Tool-Reflection-Bench's agents do."""
    helper_wait_s: float = 10.0
    """How long the tool agent waits for its helpers before it decides without the missing ones."""
    verifier_revisions: int = 1
    """Revised proposals the tool agent makes after a verifier's RECHECK, at most, per decision."""
    tor_threshold: int = 1500
    """Tool outputs longer than this many characters are restated by the `tor` helper."""
    helper_effect: float = 0.5
    """sim only: the factor on the simulated mistake rates a helper's note addresses (see the sim backend)."""
    system_addendum: str = ""
    """A paragraph appended to the system prompt of the agent this Start goes to (prompt faults)."""
    instruction: str = ""
    """The user's task instruction in place of the task's own (prompt faults)."""
    protocol: int = 1
    """How the episode's agents speak to the environment: 1, as journals written before
    `Tally` and `ConversationEnded` existed (both as `Note`s); 2, with those types; 3, the
    step limit ends the episode through the environment (`STEP_LIMIT_TO_ENV`); 4, the tool
    agent asks a helper only when the conversation can have changed its answer
    (`ASK_WHEN_CHANGED`); 5, the verifier also reviews the tool agent's messages to the user
    (`VERIFY_REPLIES`); 6, on preference tasks the tool agent names the task's user when it
    asks the memory, and the environment reports the user and, on preference tasks, the
    user's tool ratings (`RECALL_USER`). New episodes are planned at `PROTOCOL`; a journaled episode replays as
    it was recorded."""

    @classmethod
    def from_start(cls, body: Start) -> EpisodeSpec:
        return msgspec.convert(body.data, cls)

    def start(self) -> Start:
        data = msgspec.to_builtins(self)
        for key in ("system_addendum", "instruction"):  # set by prompt faults only: left out, Starts stay as they were
            if not data[key]:
                del data[key]
        return Start(data=data)

    def system_prompt(self, base: str) -> str:
        """An agent's system prompt `base` with this Start's addendum, if a prompt fault set one."""
        return f"{base}\n\n{self.system_addendum}" if self.system_addendum else base


PROTOCOL = 6
"""The protocol new episodes are planned at (see `EpisodeSpec.protocol`)."""

STEP_LIMIT_TO_ENV = 3
"""From this protocol on, the tool agent at its step limit hands the environment a failed
`ConversationEnded` instead of completing the episode itself: only the environment completes."""

ASK_WHEN_CHANGED = 4
"""From this protocol on, the tool agent asks a helper before a decision only when what is new in
the conversation can change the helper's last answer (`Helper.changed_by`); otherwise that answer
stands for the decision. Before it, every helper was asked before every decision."""

VERIFY_REPLIES = 5
"""From this protocol on, a verifier in the roster reviews the tool agent's text turns (its messages
to the user) before they are sent, as it reviews proposed tool calls, as the FAMA paper's verifier
does; before it, only tool calls were reviewed."""

RECALL_USER = 6
"""From this protocol on, on a preference task the tool agent's memory request names the task's user
(so hard preference guiding hides the tools that user rated 0), and the environment's completed
event carries `user` and, on preference tasks, `preference` and `tool_ratings`; before it, recall
was anonymous."""

TALLY = "tally"
"""Protocol 1: the text of the `Note` that carried a `Tally`."""

END = "end"
"""Protocol 1: the text of the `Note` that carried a `ConversationEnded`."""


def tally_message(spec: EpisodeSpec, tally: Tally) -> Body:
    """The tally as this episode's protocol sends it."""
    if spec.protocol >= 2:
        return tally
    return Note(text=TALLY, data={"tokens": tally.tokens, "mistakes": tally.mistakes})


def end_message(spec: EpisodeSpec, end: ConversationEnded) -> Body:
    """The end of the conversation as this episode's protocol sends it."""
    if spec.protocol >= 2:
        return end
    return Note(text=END, data={"told": end.told, "turns": end.turns, "tokens": end.tokens, "cause": end.cause})


def as_tally(body: Body) -> Tally | None:
    """A tally in either protocol, else None."""
    if isinstance(body, Note) and body.text == TALLY:
        return Tally(tokens=int(body.data.get("tokens", 0)), mistakes=list(body.data.get("mistakes", [])))
    return body if isinstance(body, Tally) else None


def as_end(body: Body) -> ConversationEnded | None:
    """The end of the conversation in either protocol, else None."""
    if isinstance(body, Note) and body.text == END:
        data = body.data
        return ConversationEnded(
            told=list(data.get("told", [])),
            turns=int(data.get("turns", 0)),
            tokens=int(data.get("tokens", 0)),
            cause=str(data.get("cause", "")),
        )
    return body if isinstance(body, ConversationEnded) else None
