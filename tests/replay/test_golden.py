"""A journal recorded by an earlier version must replay identical with today's code.

`golden/runs.db` holds retail episodes with simulator mistakes, phone episodes
and a fork. If a change to the agents, the simulator, the domains, the context
API or the encoding makes it diverge, journals users already have are broken:
that change needs a new agent version, not a new golden file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from faultline.journal import verify
from faultline.replay import Replayer
from faultline.runtime import Config, agent_lookup

GOLDEN = Path(__file__).parent / "golden" / "runs.db"
HEAD = "109f12063fc7471616a1e2427e6211a4"


def test_the_golden_run_journal_replays_identical(tmp_path: Path) -> None:
    copy = Path(shutil.copy(GOLDEN, tmp_path / "runs.db"))
    assert verify(copy, anchor=HEAD).ok
    report = Replayer(agent_lookup(Config()), reexecute_tools=True).replay(copy)
    assert report.identical, report.divergences[0].what if report.divergences else ""
    # Written before handlers left a `NoOutput` marker: the 7 quiet inputs at the ends
    # of agents' histories cannot be told from inputs never reached, so they are not compared.
    assert (report.episodes, report.messages, report.unhandled) == (7, 104, 7)
    served = Replayer(agent_lookup(Config())).replay(copy)
    assert served.identical and served.served_agents == ["env"] and served.messages < report.messages
