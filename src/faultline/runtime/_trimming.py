"""What a journal shard may trim from the stream: the messages it journaled of episodes nobody needs any more.

The stream is what a worker rebuilds an episode from after a crash, what the runner looks its completions up
in and what a journal that was down catches up from (docs/reliability.md). So it keeps every message the
journal has not written, and every message of an episode that sent one in the last `keep_s`: in flight, or
ended so recently that a late message, a worker's rebuild or a runner's look for its completion may still come.
Past that an episode is settled, whether it completed or was given up, and its messages may go.

Trimming removes a shard's episode subjects below one sequence (`Bus.trim_stream`): the first of the oldest
episode not settled. One long episode therefore holds back every later one until it settles.

Dead letters need no keep: nothing but the journal reads them, so they leave once every journal shard has
written them (`JournalService._trim`). Controls stay for ever.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class EpisodesKept:
    """The episodes whose messages the stream must keep, in the order they began in the stream."""

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self._episodes: OrderedDict[str, list[float]] = OrderedDict()
        """Episode -> [its first stream sequence, when it last sent a message]."""

    def __len__(self) -> int:
        return len(self._episodes)

    def seen(self, messages: Iterable[tuple[str, int]], now: float) -> None:
        """`messages` (episode, stream sequence), in stream order, arrived at `now` (a monotonic time)."""
        episodes = self._episodes
        for episode, seq in messages:
            entry = episodes.get(episode)
            if entry is None:
                episodes[episode] = [seq, now]
            else:
                entry[1] = now

    def floor(self, now: float, written: int) -> int:
        """The lowest stream sequence the stream must keep: the first of the oldest episode not settled by `now`,
        and never past `written`, the last sequence the journal holds. Settled episodes are forgotten."""
        settled_before = now - self.keep_s
        episodes = self._episodes
        while episodes:
            first, last_seen = next(iter(episodes.values()))
            if last_seen >= settled_before:
                return min(int(first), written + 1)
            episodes.popitem(last=False)
        return written + 1
