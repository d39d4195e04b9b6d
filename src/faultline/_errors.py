"""Every error Faultline raises on purpose, in one tree.

FaultlineError
 ├── ConfigError              a setting or config file is wrong
 │    ├── PluginError         an agent class, domain or backend named by entry point or `module:attr` cannot be loaded
 │    └── EpisodeHeldError    a run would start an episode id a journal holds, or another run started first
 ├── SubjectError             an episode id, agent or topic name is not a safe subject token
 ├── ServerError              the embedded nats-server could not be found or started
 ├── BusError                 a publish, subscribe or request on NATS failed
 │    ├── NoResponderError    a request found nobody subscribed to its subject
 │    ├── ReplyTimeoutError   a request's answer did not come within its timeout
 │    ├── AccessError         NATS refused this process's credential, or it has none where one is needed
 │    ├── PublishRefusedError NATS refused a publish this identity has no permission for
 │    ├── DeliveriesLostError deliveries a consumer sent never arrived (a server or route was lost)
 │    └── ConsumerInUseError  a consumer one process reads alone has a reader already (names the consumer)
 ├── DecodeError              bytes on the wire are not a valid envelope (dead-lettered)
 ├── FaultRuleError           a fault rule names an unknown type or an agent the system lacks, or has bad parameters
 ├── JournalError             the journal file cannot be opened or written
 │    ├── ChainError          the hash chain does not verify (names the first bad row)
 │    └── JournalStorageError the file refused a write it may take later (disk full, read-only, I/O error)
 ├── ModelError               a model backend gave up (after its retries)
 │    └── AnswerFormatError   a model's answer is not in the form its prompt asked for
 ├── MemoryStoreError         the memory store cannot be opened, or its embedder does not fit it
 ├── DomainError              a domain plugin cannot be loaded or is inconsistent
 │    └── ToolError           a domain tool refused an action (returned as the call's error, never raised to callers)
 ├── NonDeterminismError      replayed code asked for something the journal does not hold
 ├── HandlerTimeoutError      a handler ran past its time limit (names the model call it waited on)
 ├── UnknownRecipientError    a handler sent a direct message to an agent its system does not have
 ├── DirectoryBusyError       another running process holds a state directory (names its pid)
 ├── RunError                 every episode of a run ended in error (names the causes)
 ├── CampaignError            a folder is not a campaign, or holds one of other settings
 └── UsageError               a command line was wrong (printed as one line, exit 2)

Callers catch what they can act on; the CLI turns any of them into one line.
"""

from __future__ import annotations

from typing import Any


class FaultlineError(Exception):
    """Base of every error Faultline raises on purpose."""


class ConfigError(FaultlineError):
    """A setting or config file is wrong; the message names the key."""


class PluginError(ConfigError):
    """An agent class, domain or model backend, named by entry point or `package.module:attr`, cannot be loaded."""


class EpisodeHeldError(ConfigError):
    """A run would start an episode whose id is taken: a journal holds it, or another process started it first on
    the running system. `episode` is that id, `run` the run its start records ("" where none is recorded or
    readable); nothing of the episode was published."""

    def __init__(self, message: str, *, episode: str, run: str) -> None:
        super().__init__(message)
        self.episode = episode
        self.run = run


class SubjectError(FaultlineError):
    """A name that must be a NATS subject token is not one."""


class ServerError(FaultlineError):
    """The embedded nats-server could not be found, started or reached."""


class BusError(FaultlineError):
    """A NATS or JetStream operation failed."""


class NoResponderError(BusError):
    """A request found nobody subscribed to its subject: the service that answers there is not running."""


class ReplyTimeoutError(BusError):
    """A request reached a subscriber, but no answer came within the request's timeout."""


class AccessError(BusError):
    """NATS refused to let this process in: no credential, a wrong one, or a credential file that cannot be read."""


class PublishRefusedError(BusError):
    """NATS refused a publish: the identity this process connected as may not publish on that subject."""


class SubscribeRefusedError(BusError):
    """NATS refused a subscription: the identity this process connected as may not hear that subject."""


class DeliveriesLostError(BusError):
    """A consumer's deliveries skipped ahead: those between were sent over core NATS and lost on the way."""


class ConsumerInUseError(BusError):
    """A durable consumer that one process reads alone (a worker's) has a reader already: both would be handed
    every delivery. `consumer` is the one read, which may be another of the same inputs than the one asked for."""

    def __init__(self, message: str, consumer: str) -> None:
        super().__init__(message)
        self.consumer = consumer


class DecodeError(FaultlineError):
    """Bytes on a journaled subject are not a valid envelope."""


class FaultRuleError(FaultlineError):
    """A fault rule names an unknown fault type or an agent its system lacks, or its match, parameters or limits are
    wrong."""


class JournalError(FaultlineError):
    """The journal file cannot be opened, read or written."""


class ChainError(JournalError):
    """The journal's hash chain is broken at `position`."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position


class JournalStorageError(JournalError):
    """The file's storage refused a write (disk full, read-only, I/O error); nothing of it was written.

    Unlike a row the journal can never store, this passes when the storage is fixed:
    the writer may try the same batch again.
    """


class ModelError(FaultlineError):
    """A model backend failed after its retries; `retryable` says if a later try may work."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class AnswerFormatError(ModelError):
    """A model answered, but not in the form its prompt asked for (the message says what is missing)."""


class MemoryStoreError(FaultlineError):
    """The memory store cannot be opened or written, or an embedder does not match it."""


class DomainError(FaultlineError):
    """A domain plugin cannot be loaded or is inconsistent."""


class ToolError(DomainError):
    """A domain tool refused an action; `Domain.call` turns it into the outcome's `error`."""


class NonDeterminismError(FaultlineError):
    """Code under replay asked for a call the journal does not hold at that point.

    `got`: what the code asked for where a call differs from the journal's or is not in it (`{"call", "index",
    "request"}`), or the I/O a handler did outside its calls (`{"io"}`), for the report's diff."""

    def __init__(self, message: str, *, got: Any = None) -> None:
        super().__init__(message)
        self.got = got


class HandlerTimeoutError(FaultlineError):
    """A handler ran past its time limit and was cancelled; its episode fails with this cause."""


class UnknownRecipientError(FaultlineError):
    """A handler sent a direct message to an agent its system does not have (`ctx.send("mth", ...)`): raised by the
    send, so its episode fails at once with this cause. `recipient` is the name sent to, `agents` those it may
    send to, `closest` the one it most likely meant ("" if none is close)."""

    def __init__(self, message: str, *, recipient: str, agents: tuple[str, ...], closest: str = "") -> None:
        super().__init__(message)
        self.recipient = recipient
        self.agents = agents
        self.closest = closest


class DirectoryBusyError(FaultlineError):
    """Another running process holds the lock of a state directory; `pid` is that process (0 if unknown),
    `holder` the faultline command it runs ("" if unknown)."""

    def __init__(self, message: str, pid: int, holder: str = "") -> None:
        super().__init__(message)
        self.pid = pid
        self.holder = holder


class RunError(FaultlineError):
    """A run produced no result: every episode ended in error, for the causes the message gives."""


class CampaignError(FaultlineError):
    """A folder is not a fault campaign, or holds a campaign of other settings than the ones asked for."""


class UsageError(FaultlineError):
    """A command line was wrong."""
