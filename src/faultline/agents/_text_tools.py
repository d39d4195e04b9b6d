"""Tool calling in plain text, for model servers without OpenAI `tools`.

The tools are described in the system prompt and the model calls one by answering
with a JSON object, `{"tool": NAME, "arguments": {...}}`, anywhere in its answer
(a Markdown code fence around it is fine). An answer without `{"tool":` is a
message to the user. An answer that has one which does not parse becomes a call
with `arguments_error` set: the environment journals it as a failed call and the
model reads why, exactly as for a malformed native call.
"""

from __future__ import annotations

import json
import re
from typing import Any

from faultline.core import LlmToolCall

CALL_START = re.compile(r'\{\s*"tool"\s*:')

INSTRUCTIONS = """# Tools
You act through these tools. Each line gives a tool's name, what it does and the JSON schema
of its arguments:
{catalog}

To call a tool, answer with one JSON object and nothing else:
{{"tool": "<tool name>", "arguments": {{<arguments>}}}}
The result comes back in the next message. Any answer without such an object is sent to the user."""


def tools_prompt(tools: list[dict[str, Any]]) -> str:
    """The system prompt section that offers `tools` (OpenAI format) in the text format."""
    lines = []
    for tool in tools:
        function = tool["function"]
        schema = json.dumps(function.get("parameters", {}), sort_keys=True, separators=(",", ":"))
        lines.append(f"- {function['name']}: {function.get('description', '')} Arguments: {schema}")
    return INSTRUCTIONS.format(catalog="\n".join(lines))


def parse_tool_text(text: str, call_id: str) -> LlmToolCall | None:
    """The tool call in a model's answer, or None when the answer is a message to the user."""
    found = CALL_START.search(text)
    if found is None:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text, found.start())
    except json.JSONDecodeError as exc:
        return _unparseable(call_id, "", f"{exc.msg} at character {exc.pos - found.start()}", text)
    name = value.get("tool")
    arguments = value.get("arguments", {})
    if not isinstance(name, str) or not name:
        return _unparseable(call_id, "", '"tool" must be the name of a tool', text)
    if not isinstance(arguments, dict):
        return _unparseable(call_id, name, '"arguments" must be a JSON object', text)
    return LlmToolCall(id=call_id, name=name, arguments=arguments)


def _unparseable(call_id: str, name: str, why: str, text: str) -> LlmToolCall:
    error = (
        f"the tool call written in the answer does not parse ({why}); "
        'answer with {"tool": "<tool name>", "arguments": {...}}'
    )
    return LlmToolCall(id=call_id, name=name, arguments_error=error, raw_arguments=text)
