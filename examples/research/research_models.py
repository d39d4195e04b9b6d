"""A scripted model for the research example: offline, deterministic, a pure function of the request.

It stands in for a real model in tests and in CI; `faultline.toml` names it for every role. Its
knowledge is FACTS: a part about anything else gets "I found nothing", which the writer leaves out and
the scorer fails. As the fault injector's model it loses the fact of the message it is given.
"""

from __future__ import annotations

from faultline.agent import LlmRequest

FACTS = {
    "capital of france": "Paris is the capital of France.",
    "capital of japan": "Tokyo is the capital of Japan.",
    "boiling point of water": "Water boils at 100 degrees Celsius at sea level.",
    "largest planet": "Jupiter is the largest planet.",
    "speed of light": "Light travels at about 300000 km per second.",
    "author of hamlet": "Shakespeare wrote Hamlet.",
}


def answer(request: LlmRequest) -> str:
    text = request.messages[-1].content
    if request.role == "planner":
        return "\n".join(part.strip(" ?") + "?" for part in text.replace(" and ", "?").split("?") if part.strip(" ?"))
    if request.role == "researcher":
        found = [fact for topic, fact in FACTS.items() if topic in text.lower()]
        return found[0] if found else f"I found nothing on: {text}"
    if request.role == "writer":
        notes = text.partition("Notes:\n")[2] or text.partition("Draft:\n")[2]
        return " ".join(line for line in notes.splitlines() if line and not line.startswith("I found nothing"))
    if request.role == "reviewer":
        return "APPROVE" if text.strip() else "REVISE: the draft is empty"
    if request.role == "injector":  # semantic faults (faultline inject hallucination, ...): the fact is lost
        return "<rewrite>I found nothing useful.</rewrite>"
    return "I do not know."
