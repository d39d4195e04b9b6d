"""The typed messages Faultline carries: one tagged union of bodies inside an envelope.

Schema evolution rules (a journal written today must decode and replay next year):
a new field always has a default; a field's type never changes; a body kind is
never renamed or reused. Fields equal to their default are left out of the
encoding, so adding a field changes neither the bytes nor the digests of
messages that do not use it. Decoding ignores unknown fields, so an older
reader can read a newer journal.
"""

from __future__ import annotations

import hashlib
import sys
import time
from typing import Annotated, Any, ClassVar, Literal, Union

import msgspec

from faultline._errors import ConfigError, DecodeError
from faultline.core._models import ModelAttempt
from faultline.core._roster import parse_roster

RUNNER = "runner"
"""The sender name of messages the runtime itself writes (episode starts, time-outs)."""
SCORER = "scorer"
"""The runtime's agent that grades a system's episodes: finishers send it their `Finished`."""
OPERATOR = "operator"
"""The control plane's sender name and NATS identity: whoever adds fault rules or sets helper rosters."""
CONTROL_EPISODE = "control"
"""The episode name the control plane's messages (fault rules, rosters) are journaled under."""
DLQ_EPISODE = "dlq"
"""The episode name dead letters are journaled under."""
DLQ_SENDER = "bus"
"""The sender name of dead letters: the runtime's transport, which refused the message they hold."""
NON_AGENT_SENDERS = frozenset({RUNNER, OPERATOR, DLQ_SENDER})
"""The senders that are the runtime itself, never an agent of an episode."""
ALL_AGENTS = "*"
"""Every agent: in a worker group's agents (those no other group names), and in the defenses' settings."""


Finite = Annotated[float, msgspec.Meta(ge=-sys.float_info.max, le=sys.float_info.max)]
"""A float a message may carry: NaN and the infinities have no JSON, so a journal holding them could not be
exported and read back, nor its episodes listed."""

MAX_TIMER_S = 366 * 86_400.0
"""The longest wait a `Timer` may ask for: a year."""

MAX_CALLS = 1_000_000
"""The most recorded calls (`Recording.index`) one handling may make: far past any real handler."""

MAX_ID_CHARS = 256
"""The longest message id (and causation) a message may carry; the runtime's own are 20 characters."""

DEAD_LETTER_KEPT_BYTES = 4_096
"""How much of the bytes it refused a dead letter keeps: enough to see what they were, however large they came."""
DEAD_LETTER_NOTE_CHARS = 1_024
"""How much of its reason and of the subject the bytes came on a dead letter keeps."""


class Body(msgspec.Struct, frozen=True, tag_field="kind", kw_only=True, omit_defaults=True):
    """Base of every message body; the tag (`kind`) names the type on the wire.

    `route` says which subject family the body travels on (docs/design.md):
    "direct" bodies go to an agent or a topic, the rest have a subject of their own.
    """

    route: ClassVar[str] = "direct"


# -- conversation ---------------------------------------------------------------------------


class Start(Body, frozen=True, tag="start"):
    """Kicks an agent off at the beginning of an episode."""

    text: str = ""
    data: dict[str, Any] = {}


class UserTurn(Body, frozen=True, tag="user_turn"):
    text: str
    done: bool = False


class AssistantTurn(Body, frozen=True, tag="assistant_turn"):
    text: str
    done: bool = False
    ends: bool = False
    """The agent ended the episode (a terminal tool ran): the user says nothing more."""


class ToolCall(Body, frozen=True, tag="tool_call"):
    """A tool call; `arguments_error` is set when the model's arguments did not parse."""

    call_id: str
    name: str
    arguments: dict[str, Any] = {}
    arguments_error: str = ""
    injected_error: str = ""
    """Set by a tool-call perturbation: the environment answers with this error instead of running the call."""


class ToolResult(Body, frozen=True, tag="tool_result"):
    call_id: str
    name: str
    output: Any = None
    error: str = ""
    ends: bool = False
    """The tool is terminal (a transfer to a human): the episode ends here and no tool runs after it."""


class ContextRequest(Body, frozen=True, tag="context_request"):
    """The tool agent asks a helper for context before decision `step`.

    `transcript` holds the conversation messages this helper has not been sent yet
    (a helper keeps the conversation it was sent, so each request carries only what is
    new). `proposal` is set when the verifier is asked to review a proposed tool call
    ({"name", "arguments"}) or message to the user ({"reply"}); `revision` counts the
    proposals of this step before it.
    """

    step: int
    helpers: list[str] = []
    transcript: list[dict[str, Any]] = []
    proposal: dict[str, Any] = {}
    revision: int = 0


class ContextReply(Body, frozen=True, tag="context_reply"):
    """A helper's answer for decision `step`; the verifier's carries a `verdict` and, with
    RECHECK, the corrected call or final answer it proposes in `data`."""

    step: int
    helper: str
    text: str = ""
    verdict: str = ""
    data: dict[str, Any] = {}
    revision: int = 0


class Timer(Body, frozen=True, tag="timer"):
    """An agent asks to be sent `TimerFired` after `after_s` seconds: a bounded wait.

    The worker that publishes it holds the timer; a fork fires it once nothing else is
    in flight. `name` and `data` come back in the `TimerFired`.
    """

    route: ClassVar[str] = "event:timer"

    after_s: float
    name: str = ""
    data: dict[str, Any] = {}

    def __post_init__(self) -> None:
        """Refused when made (the handler that made it raises) and when decoded (a forged one is dead-lettered):
        a worker that held a timer of a negative or NaN wait would fail every time it rearmed it."""
        if not 0.0 <= self.after_s <= MAX_TIMER_S:
            raise ValueError(f"a Timer waits 0 to {MAX_TIMER_S:g} seconds, not {self.after_s!r}")


class TimerFired(Body, frozen=True, tag="timer_fired"):
    """A `Timer` ran out; the runtime sends it to the agent that set it, as from that agent (its
    `causation` is the timer), so the agent's own credentials cover it."""

    name: str = ""
    data: dict[str, Any] = {}


class Notice(Body, frozen=True, tag="notice"):
    """An agent's remark for the journal, delivered to no one: a helper that did not answer,
    an answer that could not be read."""

    route: ClassVar[str] = "event:notice"

    text: str
    data: dict[str, Any] = {}


class Note(Body, frozen=True, tag="note"):
    """A free-form payload for agents that need no dedicated type (tests, examples)."""

    text: str = ""
    data: dict[str, Any] = {}


class Tally(Body, frozen=True, tag="tally"):
    """An agent's running totals, handed to whoever scores the episode: tokens spent, and
    the mistakes an offline simulator recorded (a simulator's own labels, for its tests)."""

    tokens: int = 0
    mistakes: list[dict[str, Any]] = []


class ConversationEnded(Body, frozen=True, tag="conversation_ended"):
    """The user ends the conversation and hands over what it was told, so the episode can be scored."""

    told: list[str] = []
    turns: int = 0
    tokens: int = 0
    cause: str = ""
    failed: bool = False
    """The episode failed whatever the database holds (the tool agent's step limit, from protocol 3)."""


class Finished(Body, frozen=True, tag="finished"):
    """An agent finishes its episode with `output`: the system's scorer grades it (`faultline.agent.System`).

    Sent to the scorer (`SCORER`), which takes it only from the system's finishers; `Context.finish` sends it.
    """

    output: Any = None


# -- recorded nondeterminism ------------------------------------------------------------------


class Recording(Body, frozen=True, tag="recording"):
    """One nondeterministic call of an agent: its request digest and what it returned.

    `attempts` lists every request a retrying backend sent for the call, failed ones
    included; replay serves `response` or `error`, the final outcome, and ignores them.
    """

    route: ClassVar[str] = "rec"

    call: Literal["llm", "request", "now", "random"]
    index: Annotated[int, msgspec.Meta(ge=0, le=MAX_CALLS)]
    request_digest: str
    request: Any = None
    response: Any = None
    error: str = ""
    attempts: list[ModelAttempt] = []


class NoOutput(Body, frozen=True, tag="no_output"):
    """An agent handled an input (its `causation`) and emitted nothing.

    Outputs are the journal's evidence that an input was handled; this is that
    evidence when there are none, so replay can tell a quiet handler from an
    input the agent never reached (a run stopped, a worker still behind).
    """

    route: ClassVar[str] = "rec"


# -- lifecycle events -------------------------------------------------------------------------


class EpisodeStarted(Body, frozen=True, tag="episode_started"):
    route: ClassVar[str] = "event:started"

    domain: str = ""
    task: str = ""
    """The task's id; for a system of one's own, its input record's."""
    trial: int = 0
    seed: int = 0
    roster: list[str] = []
    forked_from: str = ""
    forked_at: int = 0
    settings: dict[str, Any] = {}
    fork: dict[str, str] = {}
    """For a fork: the change, the id of the message it changed and the id delivered instead."""
    fault_rules: list[dict[str, Any]] = []
    """For a fork: the fault rules in force in its live part (those of its source, and the one it injected)."""
    copied: int = 0
    """For a fork: how many of its first rows are its source's history before the fork point, copied with their
    times (this start among them). The rows after them are what the fork wrote when it ran, its live part, which
    its duration times. 0 in a fork journaled before forks recorded it."""
    system: str = ""
    """The system of one's own the episode ran on (`package.module:Class`); empty for the built-in tool-use system."""
    run: str = ""
    """The run the episode is one of (`faultline run --run-id`; a resumed run's retries name the run they resume);
    a fork keeps its source's. Empty where no run started it, and in every start journaled before runs were
    recorded: readers then go by the episode id's prefix (`JournalReader.of_run`)."""

    def __post_init__(self) -> None:
        """A roster of helpers there are not is refused when decoded (dead-lettered): the helper pool that reads
        every start would fail on it."""
        try:
            parse_roster(self.roster)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None


class EpisodeCompleted(Body, frozen=True, tag="episode_completed"):
    route: ClassVar[str] = "event:completed"

    outcome: Literal["success", "failure", "error", "timeout"]
    reward: Finite = 0.0
    cause: str = ""
    turns: int = 0
    tokens: int = 0
    latency_s: Annotated[float, msgspec.Meta(ge=0.0, le=sys.float_info.max)] = 0.0
    details: dict[str, Any] = {}


class ErrorRaised(Body, frozen=True, tag="error_raised"):
    """A handler raised; the episode is failed with this cause."""

    route: ClassVar[str] = "event:error"

    agent: str
    input_id: str
    error_type: str
    message: str
    traceback: str = ""


class FaultApplied(Body, frozen=True, tag="fault_applied"):
    route: ClassVar[str] = "event:fault"

    rule_id: str
    fault: str
    original: dict[str, Any] = {}
    results: list[dict[str, Any]] = []
    model_call: int = -1
    """0 or more: the fault changed that model call of `original["sender"]` handling
    `original["causation"]`; `original` and the one result then hold the request's
    `messages` before and after, not envelopes."""

    def replaced(self) -> Envelope | None:
        """The message the fault replaced, as its agent sent it; None for a fault on a model call, whose agent's
        output was never in question, and where `original` holds no envelope (any agent's credential may send such
        an event as its own, and the first hand-made journals hold some)."""
        if self.model_call >= 0:
            return None
        try:
            return msgspec.convert(self.original, Envelope)
        except msgspec.ValidationError:
            return None


class FaultSkipped(Body, frozen=True, tag="fault_skipped"):
    """A rule drew a message but its fault could not be made (the injector model's answer was
    malformed or a refusal): the message went out unchanged and the rule's budget is untouched."""

    route: ClassVar[str] = "event:fault"

    rule_id: str
    fault: str
    original: dict[str, Any] = {}
    reason: str = ""


class DefenseFired(Body, frozen=True, tag="defense_fired"):
    """A defense dropped `message_id` before `agent` saw it.

    `settings` are the defense's parameters (replay rebuilds the defense from them);
    `redelivery` marks the drop of a second delivery of a message already received.
    """

    route: ClassVar[str] = "event:defense"

    defense: str
    agent: str
    message_id: str
    reason: str = ""
    settings: dict[str, Any] = {}
    redelivery: bool = False


# -- control plane and dead letters ------------------------------------------------------------


class Control(Body, frozen=True, tag="control"):
    """A control-plane command (fault rules, helper roster, drain) on `fl.ctl.<name>`."""

    route: ClassVar[str] = "ctl"

    name: str
    data: dict[str, Any] = {}


class DeadLetter(Body, frozen=True, tag="dead_letter"):
    """Bytes that were refused, with the reason; `data` is at most their first few KB.

    `size` and `digest` describe the bytes as they came, so a letter stays small
    enough to publish however large the refused message was.
    """

    route: ClassVar[str] = "dlq"

    reason: Annotated[str, msgspec.Meta(max_length=DEAD_LETTER_NOTE_CHARS)]
    subject: Annotated[str, msgspec.Meta(max_length=DEAD_LETTER_NOTE_CHARS)]
    data: Annotated[bytes, msgspec.Meta(max_length=DEAD_LETTER_KEPT_BYTES)]
    """A dead letter is bounded also when it comes forged on the dead-letter subject: a larger one is refused."""
    stream_seq: int = 0
    size: int = 0
    digest: str = ""


MessageBody = Union[
    Start,
    UserTurn,
    AssistantTurn,
    ToolCall,
    ToolResult,
    ContextRequest,
    ContextReply,
    Timer,
    TimerFired,
    Notice,
    Note,
    Tally,
    ConversationEnded,
    Finished,
    Recording,
    NoOutput,
    EpisodeStarted,
    EpisodeCompleted,
    ErrorRaised,
    FaultApplied,
    FaultSkipped,
    DefenseFired,
    Control,
    DeadLetter,
]


class Envelope(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A message as it travels and as the journal stores it.

    `id` is deterministic (see `derive_id`), `causation` is the id of the message
    being handled when this one was emitted and `hops` its causation depth. `ts`
    is the wall-clock time of publishing: recorded, never compared by replay.
    """

    id: Annotated[str, msgspec.Meta(max_length=MAX_ID_CHARS)]
    episode: str
    sender: str
    body: MessageBody
    recipient: str = ""
    topic: str = ""
    causation: Annotated[str, msgspec.Meta(max_length=MAX_ID_CHARS)] = ""
    hops: int = 0
    ts: float = 0.0

    @property
    def kind(self) -> str:
        return body_kind(self.body)


def timer_fired(timer: Envelope) -> Envelope:
    """The message a `Timer` envelope turns into when it runs out: the same every time it is made."""
    assert isinstance(timer.body, Timer)
    return Envelope(
        id=derive_id(timer.id, 0, "f"),
        episode=timer.episode,
        sender=timer.sender,
        recipient=timer.sender,
        body=TimerFired(name=timer.body.name, data=timer.body.data),
        causation=timer.id,
        hops=timer.hops + 1,
        ts=time.time(),
    )


def body_kind(body: Body) -> str:
    return type(body).__struct_config__.tag  # type: ignore[return-value]


class _BodyBytes(msgspec.Struct):
    body: msgspec.Raw


_encoder = msgspec.msgpack.Encoder(order="deterministic")
_body_bytes_decoder = msgspec.msgpack.Decoder(_BodyBytes)
_envelope_decoder = msgspec.msgpack.Decoder(Envelope)
_body_decoder: msgspec.msgpack.Decoder[MessageBody] = msgspec.msgpack.Decoder(MessageBody)


def encode(value: Any) -> bytes:
    """Deterministic msgpack: equal values always give equal bytes (dict keys sorted)."""
    return _encoder.encode(value)


def decode_envelope(data: bytes) -> Envelope:
    """Decode wire bytes, raising DecodeError with msgspec's path-naming reason."""
    try:
        return _envelope_decoder.decode(data)
    except (msgspec.ValidationError, RecursionError) as exc:  # nested too deeply is not a valid envelope either
        raise DecodeError(f"not a valid envelope: {exc}") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # a string that is not UTF-8 is not msgpack
        raise DecodeError(f"not msgpack: {exc}") from None


def body_bytes(data: bytes) -> bytes:
    """The body of an encoded envelope exactly as it was encoded (for the journal)."""
    return bytes(_body_bytes_decoder.decode(data).body)


def decode_body(data: bytes) -> MessageBody:
    try:
        return _body_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise DecodeError(str(exc)) from None


def digest(data: bytes) -> str:
    """The digest used everywhere (bodies, requests, chain): 128-bit BLAKE2b, hex."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def body_digest(body: Body) -> str:
    return digest(encode(body))


def handling_id(message: Envelope, agent: str) -> str:
    """The parent of the ids an agent's handling of `message` derives (outputs, recordings, marker):
    the message's id, and for a topic message, which every subscriber handles, its id and the agent's."""
    return f"{message.id}@{agent}" if message.topic else message.id


def derive_id(parent: str, index: int, family: str = "o") -> str:
    """A child id that depends only on its parent's id and its place among siblings.

    Re-running a handler therefore reproduces the same ids, and JetStream's
    message-id deduplication drops the second copy.
    """
    return hashlib.blake2b(f"{parent}/{family}{index}".encode(), digest_size=10).hexdigest()
