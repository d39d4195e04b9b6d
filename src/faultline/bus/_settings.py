"""The bus's settings: connecting, publishing and the consumers all read their timeouts and limits from one
`BusSettings`."""

from __future__ import annotations

from dataclasses import dataclass

from faultline._errors import ConfigError


@dataclass(frozen=True, slots=True)
class BusSettings:
    """Every timeout and limit of the bus, with defaults that suit a single machine."""

    connect_timeout_s: float = 5.0
    max_reconnect_attempts: int = -1
    replicas: int = 1
    publish_timeout_s: float = 5.0
    """How long one attempt waits for JetStream to confirm a publish."""
    publish_retry_s: float = 60.0
    """How long unconfirmed publishes are sent again (same message ids) before the publish fails; under the
    duplicate window, so that a retry of a message stored after all is dropped as a duplicate."""
    duplicate_window_s: float = 120.0
    max_ack_pending: int = 10_000
    ack_wait_s: float = 30.0
    pending_msgs_limit: int = 1_000_000
    publish_max_pending: int = 4_000
    ping_interval_s: float = 5.0
    """How often the client pings its server: after MAX_OUTSTANDING_PINGS unanswered (a server paused or cut
    off) it moves to another node of the cluster."""
    idle_heartbeat_s: float = 5.0
    """How long a long-lived consumer (a worker's, the journal's) may stay quiet before the server tells it the
    last delivery it sent: a delivery lost just before a quiet period is so found within this, not the ack wait."""
    other_reader_wait_s: float = 5.0
    """How long opening a consumer that one process reads alone (a worker's) waits for another reader of it to let
    go before it is refused (ConsumerInUseError): a reader stopped or killed a moment ago is one until its server
    has dropped it."""
    partitions: int = 1
    """Into how many partitions the system's subjects divide its episodes (`Subjects`): every process of a
    system must agree, and the stream records it."""

    def __post_init__(self) -> None:
        if self.publish_retry_s >= self.duplicate_window_s:
            raise ConfigError(
                f"publish_retry_s ({self.publish_retry_s:g}) must be under the duplicate window"
                f" ({self.duplicate_window_s:g}s), or a message sent again could be stored twice"
            )
