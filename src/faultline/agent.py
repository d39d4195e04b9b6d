"""Everything a person needs to write agents, domains and tests of them, in one import.

    from faultline.agent import Agent, Context, Envelope, LlmRequest, ChatMessage, Note

An agent subclasses `Agent` and handles one message at a time in `on_message(msg, ctx)`;
everything nondeterministic (model calls, service requests, time, randomness) goes through
`ctx`, so the journal can replay it exactly. Messages are typed bodies sent with `ctx.send`,
`ctx.publish` and `ctx.emit`. A tool-use domain subclasses `Domain` and marks its tools with
`@tool`. A system of one's own subclasses `System`: its agents, the entry that receives each input
record, the finishers whose `ctx.finish(output)` ends an episode, and `score`, which grades the
output with a `Grade` (docs/agents.md). `AgentHarness` drives one agent in-process for a unit test; `Replayer` checks that a
journal recorded with your agents replays identically. Importing this module loads no NATS.

What is not named here is Faultline's own machinery, free to change between versions.
`docs/api.md` documents each name.
"""

from faultline._errors import DomainError, FaultlineError, NonDeterminismError, ToolError, UnknownRecipientError
from faultline.agents import UserSimulator
from faultline.core import (
    Agent,
    AgentHarness,
    AssistantTurn,
    Body,
    ChatMessage,
    Context,
    ContextReply,
    ContextRequest,
    ConversationEnded,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    ErrorRaised,
    Finished,
    Grade,
    Inbound,
    InputRecord,
    Interceptor,
    LlmRequest,
    LlmResponse,
    LlmToolCall,
    MessageBody,
    ModelBackend,
    Note,
    Notice,
    Outbound,
    Start,
    System,
    Timer,
    TimerFired,
    ToolCall,
    ToolResult,
    Usage,
    UserTurn,
)
from faultline.envs import (
    Action,
    Budgets,
    Collection,
    Documents,
    Domain,
    Score,
    Task,
    ToolOutcome,
    ToolSpec,
    document_tool,
    load_domain,
    seed_documents,
    tool,
    use_plugin_path,
)
from faultline.replay import Divergence, Replayer, ReplayReport

__all__ = [
    "Action",
    "Agent",
    "AgentHarness",
    "AssistantTurn",
    "Body",
    "Budgets",
    "ChatMessage",
    "Collection",
    "Context",
    "ContextReply",
    "ContextRequest",
    "ConversationEnded",
    "Divergence",
    "Documents",
    "Domain",
    "DomainError",
    "Envelope",
    "EpisodeCompleted",
    "EpisodeStarted",
    "ErrorRaised",
    "FaultlineError",
    "Finished",
    "Grade",
    "Inbound",
    "InputRecord",
    "Interceptor",
    "LlmRequest",
    "LlmResponse",
    "LlmToolCall",
    "MessageBody",
    "ModelBackend",
    "NonDeterminismError",
    "Note",
    "Notice",
    "Outbound",
    "ReplayReport",
    "Replayer",
    "Score",
    "Start",
    "System",
    "Task",
    "Timer",
    "TimerFired",
    "ToolCall",
    "ToolError",
    "ToolOutcome",
    "ToolResult",
    "ToolSpec",
    "UnknownRecipientError",
    "Usage",
    "UserSimulator",
    "UserTurn",
    "document_tool",
    "load_domain",
    "seed_documents",
    "tool",
    "use_plugin_path",
]
