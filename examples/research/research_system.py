"""A research team: a planner splits a question, two researchers answer the parts, a writer merges their
answers, and a reviewer approves the draft or sends it back for revision.

The planner broadcasts every part on the topic `questions`; both researchers hear each part and answer
their share. The reviewer's `ctx.finish(draft)` ends the episode and `Research.score` grades the draft
against the record's expected keywords.
"""

from __future__ import annotations

from typing import Any, ClassVar

from faultline.agent import Agent, ChatMessage, Context, Envelope, Grade, InputRecord, LlmRequest, Note, Start, System

QUESTIONS = "questions"
"""The topic the planner broadcasts the parts of a question on."""
RESEARCHERS = 2
MAX_REVISIONS = 2
"""Drafts the reviewer sends back before it finishes with the last one, approved or not."""


async def ask(ctx: Context, role: str, instruction: str, text: str) -> str:
    """One model call of the role: an instruction and a text, answered in text."""
    request = LlmRequest(
        role=role, messages=[ChatMessage(role="system", content=instruction), ChatMessage(role="user", content=text)]
    )
    return (await ctx.llm(request)).content


class Planner(Agent):
    name = "planner"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if not isinstance(msg.body, Start):
            return
        question = str(msg.body.data["question"])
        plan = await ask(ctx, "planner", "Split the question into its parts, one a line.", question)
        parts = [line.strip() for line in plan.splitlines() if line.strip()]
        ctx.send("writer", Note(text="plan", data={"question": question, "parts": parts}))
        for index, part in enumerate(parts):
            ctx.publish(QUESTIONS, Note(text=part, data={"part": index}))


class Researcher(Agent):
    """Hears every part, answers those of its share (part number modulo the researchers)."""

    topics = (QUESTIONS,)
    share: ClassVar[int]

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        body = msg.body
        if not (isinstance(body, Note) and msg.topic == QUESTIONS):
            return
        part = int(body.data["part"])
        if part % RESEARCHERS != self.share:
            return
        answer = await ask(ctx, "researcher", "Answer the question in one sentence.", body.text)
        ctx.send("writer", Note(text=answer, data={"part": part}))


class ResearcherA(Researcher):
    name = "researcher_a"
    share = 0


class ResearcherB(Researcher):
    name = "researcher_b"
    share = 1


class Writer(Agent):
    """Merges the answers once it has one for every part; rewrites the draft when the reviewer asks."""

    name = "writer"

    def __init__(self) -> None:
        self.plan: dict[str, Any] = {}
        self.answers: dict[int, str] = {}
        self.draft = ""

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        body = msg.body
        if not isinstance(body, Note):
            return
        if msg.sender == "planner" and body.text == "plan":
            self.plan = body.data
        elif msg.sender == "reviewer":
            await self._write(ctx, f"Reviewer: {body.text}\n\nDraft:\n{self.draft}")
            return
        elif msg.sender.startswith("researcher"):
            self.answers.setdefault(int(body.data["part"]), body.text)
        if self.plan and not self.draft and len(self.answers) == len(self.plan["parts"]):
            notes = "\n".join(self.answers[i] for i in sorted(self.answers))
            await self._write(ctx, f"Question: {self.plan['question']}\n\nNotes:\n{notes}")

    async def _write(self, ctx: Context, text: str) -> None:
        self.draft = await ask(ctx, "writer", "Write one answer from these notes.", text)
        ctx.send("reviewer", Note(text=self.draft))


class Reviewer(Agent):
    """Approves a draft, or sends it back with what is missing, at most MAX_REVISIONS times."""

    name = "reviewer"

    def __init__(self) -> None:
        self.revisions = 0

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if not (isinstance(msg.body, Note) and msg.sender == "writer"):
            return
        draft = msg.body.text
        verdict = await ask(ctx, "reviewer", "Reply APPROVE, or REVISE: and what is missing.", draft)
        if verdict.startswith("REVISE") and self.revisions < MAX_REVISIONS:
            self.revisions += 1
            ctx.send("writer", Note(text=verdict))
        else:
            ctx.finish(draft)


class Research(System):
    name = "research"
    agents = (Planner, ResearcherA, ResearcherB, Writer, Reviewer)
    entry = "planner"
    finishers = ("reviewer",)
    needs = ("question", "expect")

    def score(self, record: InputRecord, output: Any) -> Grade:
        expected = [str(word) for word in record.data["expect"]]
        text = str(output).lower()
        missing = [word for word in expected if word.lower() not in text]
        if not missing:
            return Grade(1.0)
        return Grade(1.0 - len(missing) / len(expected), f"the answer does not mention {', '.join(missing)}")
