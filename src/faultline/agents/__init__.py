"""The agents that ship with Faultline: the episode loop (tool agent, user simulator,
environment host) that make the built-in tool-use system, the scorer that grades a user's
system, the FAMA helpers (`faultline.agents.helpers`), and what an agent asks the
memory service (`faultline.agents.memory`). They need no NATS, so a journal replays without it."""

from faultline.agents._env import EnvironmentHost
from faultline.agents._episode import PROTOCOL, EpisodeSpec
from faultline.agents._scorer import Scorer, ScorerStart
from faultline.agents._text_tools import parse_tool_text, tools_prompt
from faultline.agents._tool import ToolAgent
from faultline.agents._tool_use import ToolUse
from faultline.agents._user import UserSimulator

__all__ = [
    "PROTOCOL",
    "EnvironmentHost",
    "EpisodeSpec",
    "Scorer",
    "ScorerStart",
    "ToolAgent",
    "ToolUse",
    "UserSimulator",
    "parse_tool_text",
    "tools_prompt",
]
