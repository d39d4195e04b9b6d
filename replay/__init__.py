"""Replay: exact re-execution of a journal, divergence reports, forks and failure attribution."""

from faultline.replay._replay import Divergence, Replayer, ReplayReport, comparable, replay_agent

__all__ = ["Divergence", "ReplayReport", "Replayer", "comparable", "replay_agent"]
