"""The NATS side: the transport (JetStream publish and consume; requests, answers and notices on
core NATS), the embedded server, who may speak on which subject, and following fault rules live. The only package that talks to
NATS: everything else uses these names, and neither imports the NATS client nor catches its errors."""

from faultline.bus._access import (
    JOURNAL,
    Access,
    ConsumerSpec,
    Credential,
    Identity,
    Login,
    agent_identity,
    agent_reads,
    journal_identity,
    load_credential,
    operator_identity,
    recorder_identity,
    worker_reads,
)
from faultline.bus._consumer import Consumer, Delivery
from faultline.bus._consumers import ConsumerState
from faultline.bus._follow import FollowSettings, WorkerId, follow_rules, publish_controls, read_rules
from faultline.bus._messaging import Message, Subscription, decode_notice
from faultline.bus._retry import asked_again
from faultline.bus._server import EmbeddedServer, default_server_cores, find_nats_server, free_port
from faultline.bus._settings import BusSettings
from faultline.bus._stream import StreamState
from faultline.bus._tells import OPEN_TELLER, hear, tell, teller
from faultline.bus._tls import TLSFiles, make_certificates
from faultline.bus._transport import Bus
from faultline.core import OPERATOR

__all__ = [
    "JOURNAL",
    "OPEN_TELLER",
    "OPERATOR",
    "Access",
    "Bus",
    "BusSettings",
    "Consumer",
    "ConsumerSpec",
    "ConsumerState",
    "Credential",
    "Delivery",
    "EmbeddedServer",
    "default_server_cores",
    "FollowSettings",
    "Identity",
    "Login",
    "Message",
    "StreamState",
    "Subscription",
    "TLSFiles",
    "WorkerId",
    "agent_identity",
    "agent_reads",
    "asked_again",
    "decode_notice",
    "find_nats_server",
    "follow_rules",
    "free_port",
    "hear",
    "journal_identity",
    "load_credential",
    "make_certificates",
    "operator_identity",
    "recorder_identity",
    "publish_controls",
    "read_rules",
    "tell",
    "teller",
    "worker_reads",
]
