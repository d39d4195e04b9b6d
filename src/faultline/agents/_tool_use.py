"""The built-in system: a tool agent serving a simulated user against a domain's environment."""

from __future__ import annotations

from typing import Any

from faultline.agents._env import EnvironmentHost
from faultline.agents._tool import ToolAgent
from faultline.agents._user import UserSimulator
from faultline.core import Grade, InputRecord, System


class ToolUse(System):
    """The tool-use domains (`--domain retail`): the episode's inputs are the domain's tasks.

    Every agent gets a Start built from the run's settings (`EpisodeSpec`), the user speaks
    first, and the environment completes the episode: it scores the database it holds against
    the task's ground truth, so no scorer agent takes part.
    """

    name = "tool-use"
    agents = (EnvironmentHost, ToolAgent, UserSimulator)
    entry = "user"
    finishers = ("user", "tool")
    completer = "env"

    def score(self, record: InputRecord, output: Any) -> Grade:
        raise NotImplementedError("the environment scores tool-use episodes against the domain's ground truth")
