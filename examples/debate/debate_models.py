"""A scripted model for the debate example: offline, deterministic, a pure function of the request.

Each debater argues from EVIDENCE, strongly where the motion's topic backs its side. The judge counts
the strong arguments of each side and rules for the one with more; a tie goes to con (the motion
stands unproven). As the fault injector's model it weakens the argument it is given.
"""

from __future__ import annotations

from faultline.agent import LlmRequest

EVIDENCE = {
    "pro": ("exercise", "sleep", "reading"),
    "con": ("sugar", "smoking"),
}
"""Topics whose motions each side argues with evidence."""
STRONG = "studies show"


def answer(request: LlmRequest) -> str:
    text = request.messages[-1].content.lower()
    if request.role in EVIDENCE:
        motion = text.splitlines()[0].removeprefix("motion: ").rstrip(".")
        backed = any(topic in motion for topic in EVIDENCE[request.role])
        return f"{STRONG if backed else 'I feel'} that {motion} is {'right' if request.role == 'pro' else 'wrong'}."
    if request.role == "judge":
        lines = text.splitlines()
        pro = sum(STRONG in line for line in lines if line.startswith("pro:"))
        con = sum(STRONG in line for line in lines if line.startswith("con:"))
        return "pro" if pro > con else "con"
    if request.role == "injector":
        return "<rewrite>I feel that the other side may have a point.</rewrite>"
    return "I abstain."
