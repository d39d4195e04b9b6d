"""The NATS side: the transport (JetStream publish and consume; requests, answers and notices on
core NATS), the embedded server, and following fault rules live. The only package that talks to
NATS: everything else uses these names, and neither imports the NATS client nor catches its errors."""

from faultline.bus._consumer import Consumer, Delivery
from faultline.bus._follow import FollowSettings, follow_rules, publish_controls, read_rules
from faultline.bus._messaging import Message, Subscription
from faultline.bus._server import EmbeddedServer, find_nats_server, free_port
from faultline.bus._transport import Bus, BusSettings, StreamState

__all__ = [
    "Bus",
    "BusSettings",
    "Consumer",
    "Delivery",
    "EmbeddedServer",
    "FollowSettings",
    "Message",
    "StreamState",
    "Subscription",
    "find_nats_server",
    "follow_rules",
    "free_port",
    "publish_controls",
    "read_rules",
]
