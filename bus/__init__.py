"""The NATS side: the transport (JetStream publish and consume), the embedded server, and
following fault rules live. The only package that talks to NATS."""

from faultline.bus._follow import FollowSettings, follow_rules, publish_controls, read_rules
from faultline.bus._server import EmbeddedServer, find_nats_server, free_port
from faultline.bus._transport import Bus, BusSettings, Consumer, Delivery

__all__ = [
    "Bus",
    "BusSettings",
    "Consumer",
    "Delivery",
    "EmbeddedServer",
    "FollowSettings",
    "find_nats_server",
    "follow_rules",
    "free_port",
    "publish_controls",
    "read_rules",
]
