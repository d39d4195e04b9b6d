"""Replay: exact re-execution of a journal, divergence reports, forks and failure attribution."""

from typing import TYPE_CHECKING

from faultline._lazy import lazy_exports

if TYPE_CHECKING:
    from faultline.replay._attribution import (
        DEFAULT_SAMPLES,
        FAULT_REPAIR,
        METHODS,
        ORACLE_REPAIR,
        SAMPLED,
        Attribution,
        ForkOutcome,
        Method,
        Probe,
        Step,
        attribute_episode,
        gold_action,
        largest_rise,
        steps,
        wilson,
    )
    from faultline.replay._categorize import categorize
    from faultline.replay._fork import (
        Answer,
        Change,
        Drop,
        ForkResult,
        Inject,
        Keep,
        Replace,
        UndoFault,
        fork_episode,
        fork_id,
        forks_path,
    )
    from faultline.replay._replay import (
        Divergence,
        Replayer,
        ReplayProgress,
        ReplayReport,
        comparable,
        replay_agent,
    )


__all__ = [
    "DEFAULT_SAMPLES",
    "FAULT_REPAIR",
    "METHODS",
    "Method",
    "ORACLE_REPAIR",
    "SAMPLED",
    "Answer",
    "Attribution",
    "Change",
    "Divergence",
    "Drop",
    "ForkOutcome",
    "ForkResult",
    "Inject",
    "Keep",
    "Probe",
    "Replace",
    "ReplayReport",
    "Replayer",
    "ReplayProgress",
    "Step",
    "UndoFault",
    "attribute_episode",
    "categorize",
    "comparable",
    "fork_episode",
    "fork_id",
    "forks_path",
    "gold_action",
    "replay_agent",
    "largest_rise",
    "steps",
    "wilson",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "faultline.replay._attribution": (
            "DEFAULT_SAMPLES",
            "FAULT_REPAIR",
            "METHODS",
            "ORACLE_REPAIR",
            "SAMPLED",
            "Attribution",
            "ForkOutcome",
            "Method",
            "Probe",
            "Step",
            "attribute_episode",
            "gold_action",
            "largest_rise",
            "steps",
            "wilson",
        ),
        "faultline.replay._categorize": ("categorize",),
        "faultline.replay._fork": (
            "Answer",
            "Change",
            "Drop",
            "ForkResult",
            "Inject",
            "Keep",
            "Replace",
            "UndoFault",
            "fork_episode",
            "fork_id",
            "forks_path",
        ),
        "faultline.replay._replay": (
            "Divergence",
            "Replayer",
            "ReplayProgress",
            "ReplayReport",
            "comparable",
            "replay_agent",
        ),
    },
)
