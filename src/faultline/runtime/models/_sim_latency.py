"""How long the `sim` backend takes to answer: an emulated model's speed, per role.

A SIMULATION for measuring the runtime against slow models (how many episodes it holds in
flight, what each costs): it says nothing about any model. The latency of a call is a draw
from `distribution` plus `completion_tokens / tokens_per_s`. The draw is a pure function of
the role's `seed`, the episode, the agent and the request's encoding, so a rerun of the same
episodes waits the same times and records the same `latency_s`. The wait is an async sleep:
a worker holds every other episode while one waits. Replay serves the journaled reply and
never waits.
"""

from __future__ import annotations

import hashlib
import math
from statistics import NormalDist
from typing import Literal

import msgspec

from faultline.core import LlmRequest, encode
from faultline.runtime._durations import Amount, SecondsOrZero

Distribution = Literal["none", "fixed", "uniform", "lognormal"]


class SimLatency(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`[models.<role>.latency]`: how long the `sim` backend takes per call for that role.

    "none" (the default) answers at once. "fixed" waits `seconds`; "uniform" a draw between
    `low_s` and `high_s`; "lognormal" a draw whose median is `seconds`, spread by `sigma`
    (the standard deviation of its logarithm). `tokens_per_s` adds the time to write the
    answer, per completion token (0: none). `seed` picks another, equally deterministic, set
    of draws.
    """

    distribution: Distribution = "none"
    seconds: SecondsOrZero = 0.0
    low_s: SecondsOrZero = 0.0
    high_s: SecondsOrZero = 0.0
    sigma: Amount = 0.5
    tokens_per_s: Amount = 0.0
    seed: int = 0

    @property
    def emulated(self) -> bool:
        """Whether a call waits at all."""
        return self.distribution != "none" or self.tokens_per_s > 0

    def problem(self) -> str:
        """What the types cannot say is wrong with these settings, in one line; empty when nothing is."""
        if self.distribution == "uniform" and self.low_s > self.high_s:
            return f"low_s {self.low_s:g} is above high_s {self.high_s:g}"
        if self.distribution == "lognormal" and self.seconds <= 0:
            return "a lognormal latency needs its median: seconds > 0"
        if self.distribution == "none" and (self.seconds or self.low_s or self.high_s):
            return 'seconds, low_s and high_s need a distribution ("fixed", "uniform" or "lognormal")'
        return ""

    def draw(self, request: LlmRequest, completion_tokens: int, *, episode: str = "", agent: str = "") -> float:
        """The seconds this call takes: the same request of the same (episode, agent) always takes as long."""
        writing = completion_tokens / self.tokens_per_s if self.tokens_per_s > 0 else 0.0
        if self.distribution == "none":
            return writing
        if self.distribution == "fixed":
            return self.seconds + writing
        u = _unit(f"sim-latency:{self.seed}:{episode}:{agent}:".encode() + encode(request))
        if self.distribution == "uniform":
            return self.low_s + (self.high_s - self.low_s) * u + writing
        return math.exp(math.log(self.seconds) + self.sigma * _STANDARD_NORMAL.inv_cdf(u)) + writing


_STANDARD_NORMAL = NormalDist()


def _unit(key: bytes) -> float:
    """A number in (0, 1) that depends on `key` alone: a hash, five times cheaper than seeding a `Random` per
    call, which a worker holding thousands of episodes in flight does thousands of times a second."""
    return (int.from_bytes(hashlib.blake2b(key, digest_size=8).digest()) + 0.5) / 2**64
