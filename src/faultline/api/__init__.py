"""The programmatic API: what the `faultline` command does, callable from a notebook, a test or a script.

    from faultline.api import RunSpec, attribute, replay, run

    report = run(RunSpec(tasks=5, trials=2))
    print(report.summary.pass_k, report.journal)
    assert replay(report.journal).identical
    for answer in attribute(report.journal):
        print(answer.episode, answer.agent, answer.step, answer.method)

`run` starts a local system for the run (or uses the one at `RunSpec.nats`) and stops it after;
`replay` and `attribute` need only the journal file. The command line parses its arguments and
calls these. Below them, `RunPlan` and `run_plan` run planned episodes on a bus a program holds.
"""

from typing import TYPE_CHECKING

from faultline._lazy import lazy_exports

if TYPE_CHECKING:
    from faultline.api._attribute import attribute, failed_episodes
    from faultline.api._journal import replay
    from faultline.api._overhead import TokenOverhead, token_overhead
    from faultline.api._plan import (
        PlannedEpisode,
        RunPlan,
        RunResult,
        episode_id,
        plan_episodes,
        plan_records,
        repeated,
        run_plan,
        start_envelopes,
        tasks_taken,
        wait_for_journal,
    )
    from faultline.api._run import (
        RunProgress,
        RunReport,
        RunSpec,
        SilentProgress,
        memory_mode,
        run,
        run_limits,
        uses_sim,
        with_system,
    )
    from faultline.api._summary import Summary, costed, pass_hat_k, summarize, with_costs
    from faultline.api._system import (
        STOP_SIGNALS,
        StopRequest,
        config_flag,
        config_source,
        fama_service,
        journal_problem,
        made_tls,
        roster_worker,
        run_supervised,
        stop_on_signal,
        with_helpers,
        worker_specs,
    )
    from faultline.core import SIM_NOTE, SIM_SYSTEM_NOTE
    from faultline.runtime import HELPER_GROUP, load_config


__all__ = [
    "HELPER_GROUP",
    "SIM_NOTE",
    "SIM_SYSTEM_NOTE",
    "STOP_SIGNALS",
    "PlannedEpisode",
    "RunPlan",
    "RunProgress",
    "SilentProgress",
    "RunReport",
    "RunResult",
    "RunSpec",
    "StopRequest",
    "Summary",
    "TokenOverhead",
    "attribute",
    "config_flag",
    "config_source",
    "costed",
    "episode_id",
    "failed_episodes",
    "fama_service",
    "journal_problem",
    "made_tls",
    "memory_mode",
    "pass_hat_k",
    "plan_episodes",
    "plan_records",
    "repeated",
    "replay",
    "roster_worker",
    "run",
    "run_limits",
    "run_plan",
    "run_supervised",
    "start_envelopes",
    "stop_on_signal",
    "summarize",
    "tasks_taken",
    "token_overhead",
    "uses_sim",
    "wait_for_journal",
    "with_costs",
    "with_helpers",
    "with_system",
    "load_config",
    "worker_specs",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "faultline.api._attribute": ("attribute", "failed_episodes"),
        "faultline.api._journal": ("replay",),
        "faultline.api._overhead": ("TokenOverhead", "token_overhead"),
        "faultline.api._plan": (
            "PlannedEpisode",
            "RunPlan",
            "RunResult",
            "episode_id",
            "plan_episodes",
            "plan_records",
            "repeated",
            "run_plan",
            "start_envelopes",
            "tasks_taken",
            "wait_for_journal",
        ),
        "faultline.api._summary": ("Summary", "costed", "pass_hat_k", "summarize", "with_costs"),
        "faultline.api._run": (
            "RunProgress",
            "SilentProgress",
            "RunReport",
            "RunSpec",
            "memory_mode",
            "run",
            "run_limits",
            "uses_sim",
            "with_system",
        ),
        "faultline.core": ("SIM_NOTE", "SIM_SYSTEM_NOTE"),
        "faultline.runtime": ("HELPER_GROUP", "load_config"),
        "faultline.api._system": (
            "STOP_SIGNALS",
            "StopRequest",
            "config_flag",
            "config_source",
            "fama_service",
            "journal_problem",
            "made_tls",
            "roster_worker",
            "run_supervised",
            "stop_on_signal",
            "with_helpers",
            "worker_specs",
        ),
    },
)
