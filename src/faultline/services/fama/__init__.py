"""The FAMA controller: failure analysis of completed episodes, and a helper roster chosen from it.

`failure_case` turns a failed episode's messages into what the analysts read (the trajectory, as
in the FAMA paper, or with the task's ground truth for informed analysts; never a simulator's
labels); `FamaController` is the agent that runs the four error analysts, the orchestrator and
the mitigation agent on it through `ctx.llm`, and keeps the roster of its (domain, model) over a
window of failures (`faultline.runtime.FamaConfig`).
"""

from faultline.services.fama._case import (
    FAILED_OUTCOMES,
    Decisive,
    Deviation,
    Evidence,
    FailureCase,
    failure_case,
    with_attribution,
)
from faultline.services.fama._categories import (
    CATEGORIES,
    CATEGORY_IDS,
    HELPER_FUNCTIONS,
    MITIGATION,
    SHORT,
    Category,
    category,
)
from faultline.services.fama._controller import (
    ANALYSIS,
    CASE,
    CONTROLLER,
    FAILED,
    ROSTER,
    Analysis,
    FamaController,
    analyze,
    case_message,
    choose_roster,
    controller_episode,
    joined,
    task_rosters,
    window_counts,
)
from faultline.services.fama._offline import CaseReport, JournalAnalysis, analyze_cases, attribute_cases, failure_cases
from faultline.services.fama._prompts import (
    AnalystVerdict,
    MainError,
    Mitigation,
    analyst_request,
    mitigation_request,
    orchestrator_request,
    parse_analyst,
    parse_main,
    parse_mitigation,
)
from faultline.services.fama._service import FamaService, serve_fama

__all__ = [
    "ANALYSIS",
    "CASE",
    "CATEGORIES",
    "CATEGORY_IDS",
    "CONTROLLER",
    "FAILED",
    "FAILED_OUTCOMES",
    "HELPER_FUNCTIONS",
    "MITIGATION",
    "ROSTER",
    "SHORT",
    "Analysis",
    "AnalystVerdict",
    "CaseReport",
    "Category",
    "Decisive",
    "Deviation",
    "Evidence",
    "FailureCase",
    "FamaController",
    "FamaService",
    "JournalAnalysis",
    "MainError",
    "Mitigation",
    "analyst_request",
    "analyze",
    "analyze_cases",
    "attribute_cases",
    "case_message",
    "category",
    "choose_roster",
    "controller_episode",
    "failure_case",
    "failure_cases",
    "joined",
    "mitigation_request",
    "orchestrator_request",
    "parse_analyst",
    "parse_main",
    "parse_mitigation",
    "serve_fama",
    "task_rosters",
    "window_counts",
    "with_attribution",
]
