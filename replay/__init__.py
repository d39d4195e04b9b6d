"""Replay: exact re-execution of a journal, divergence reports, forks and failure attribution."""

from faultline.replay._attribution import Attribution, Decision, attribute, categorize, decisions
from faultline.replay._fork import Change, Drop, ForkResult, Keep, Replace, UndoFault, fork_episode, fork_id, forks_path
from faultline.replay._replay import Divergence, Replayer, ReplayReport, comparable, replay_agent

__all__ = [
    "Attribution",
    "Change",
    "Decision",
    "Divergence",
    "Drop",
    "ForkResult",
    "Keep",
    "Replace",
    "ReplayReport",
    "Replayer",
    "UndoFault",
    "attribute",
    "categorize",
    "comparable",
    "decisions",
    "fork_episode",
    "fork_id",
    "forks_path",
    "replay_agent",
]
