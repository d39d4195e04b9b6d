"""Numbers a configuration may give: finite, and within what every clock and server that uses them can hold."""

from typing import Annotated

import msgspec

MAX_SECONDS = 30 * 86_400.0
"""The longest duration a setting may name: a month. nats-server counts in nanoseconds of a 64-bit integer and
Python's timers in floats, so `inf` or 1e300 seconds would fail far from the configuration that said it."""

Seconds = Annotated[float, msgspec.Meta(gt=0.0, le=MAX_SECONDS)]
"""A duration above 0."""
SecondsOrZero = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_SECONDS)]
"""A duration, where 0 stands for none or for a default."""
Amount = Annotated[float, msgspec.Meta(ge=0.0, le=1e9)]
"""A finite quantity of 0 or more (a rate, a temperature, a spread)."""
