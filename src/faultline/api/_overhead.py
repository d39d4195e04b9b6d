"""The helpers' overhead as the FAMA paper's Table 2 measures it: their share of the tokens generated
per episode by the tool-use agent and the helpers together, with the spread of those tokens over episodes.

Table 2 counts generated (completion) tokens: per episode, the assistant's plus the helpers'; it reports
their minimum, median, maximum and mean over episodes, the assistant's and the helpers' means apart, and
the overhead as the helpers' mean over the whole mean (FAMA on airline: 795.3 / 2617.4, about 30%).
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping

import msgspec

ASSISTANT = "tool"
"""The agent whose tokens are the assistant's: the tool-use agent."""


class TokenOverhead(msgspec.Struct, frozen=True, kw_only=True):
    """Table 2's row for a set of episodes. Tokens are generated ones, per episode."""

    episodes: int
    min_tokens: float
    median_tokens: float
    max_tokens: float
    mean_tokens: float
    """Assistant and helpers together."""
    assistant_tokens: float
    """The tool-use agent's, mean per episode."""
    helper_tokens: float
    """The helpers', mean per episode."""
    share: float
    """`helper_tokens / mean_tokens`: the paper's overhead (0 when nothing was generated)."""


def token_overhead(generated: Mapping[str, Mapping[str, float]], helpers: Collection[str]) -> TokenOverhead | None:
    """Table 2's row from the tokens each agent generated in each episode (`generated[episode][agent]`);
    `helpers` are the helper agents' names, other agents than the assistant and them are left out.
    None when there is no episode. An episode whose agents made no call counts, with 0 tokens."""
    if not generated:
        return None
    assistant = [float(agents.get(ASSISTANT, 0)) for agents in generated.values()]
    helped = [float(sum(n for agent, n in agents.items() if agent in helpers)) for agents in generated.values()]
    totals = [a + h for a, h in zip(assistant, helped, strict=True)]
    mean = statistics.fmean(totals)
    helper_mean = statistics.fmean(helped)
    return TokenOverhead(
        episodes=len(totals),
        min_tokens=min(totals),
        median_tokens=statistics.median(totals),
        max_tokens=max(totals),
        mean_tokens=mean,
        assistant_tokens=statistics.fmean(assistant),
        helper_tokens=helper_mean,
        share=helper_mean / mean if mean else 0.0,
    )
