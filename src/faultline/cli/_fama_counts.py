"""What `fama analyze` and `fama loop` share: the `--analysts` flag and the main-error counts per category.

A module of its own because `_fama`, which registers the `fama` group, imports `_fama_loop`.
"""

from __future__ import annotations

import argparse
from collections import Counter

import msgspec

from faultline.api import SIM_NOTE
from faultline.runtime import Config
from faultline.services.fama import CATEGORIES, CaseReport

SIM_JUDGE_NOTE = "sim judge: a deterministic stand-in that measures the mechanism, not a model"


def fama_note(config: Config, *, sim_runs: bool) -> str:
    """What a FAMA command's numbers measure where its failures come from sim runs or its judge is the sim
    stand-in: the runtime's mechanisms, not a model ("" where neither is)."""
    judged_by_sim = config.model(config.fama.role).backend == "sim"
    return "; ".join(note for note, on in ((SIM_NOTE, sim_runs), (SIM_JUDGE_NOTE, judged_by_sim)) if on)


def add_analysts_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--analysts",
        choices=("trajectory", "informed"),
        help="what the error analysts read: trajectory, the conversation and tool calls alone as in the FAMA"
        " paper (the default), or informed, which adds the task's ground-truth actions and required outputs and"
        " the attribution's decisive step (over [fama] analysts)",
    )


def with_fama_flags(config: Config, **flags: str | None) -> Config:
    """The config with the `[fama]` settings the command line gave (the flags that are not None)."""
    given = {name: value for name, value in flags.items() if value is not None}
    return msgspec.structs.replace(config, fama=msgspec.structs.replace(config.fama, **given)) if given else config


def category_counts(cases: list[CaseReport]) -> dict[str, int]:
    """How many analysed failures name each category among their main errors (every category listed)."""
    found = Counter(c for case in cases if case.analysis for c in case.analysis.main.main)
    return {cat.id: found.get(cat.id, 0) for cat in CATEGORIES}
