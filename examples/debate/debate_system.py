"""A debate: the judge opens a motion on the topic `floor`, two debaters argue it for a number of rounds,
each hearing the other on the same topic, and the judge rules for one side.

Every argument is published on the shared topic, so every debater (and the judge) hears every other's:
a storm or a broadcast there multiplies the rounds, and a cycle keeps a debater talking to itself.
`Debate.score` checks the ruling against the record's expected winner.
"""

from __future__ import annotations

from typing import Any, ClassVar

from faultline.agent import Agent, ChatMessage, Context, Envelope, Grade, InputRecord, LlmRequest, Note, Start, System

FLOOR = "floor"
"""The topic the debate is held on."""
ROUNDS = 2
"""Arguments each debater makes before the judge rules."""


async def ask(ctx: Context, role: str, instruction: str, text: str) -> str:
    request = LlmRequest(
        role=role, messages=[ChatMessage(role="system", content=instruction), ChatMessage(role="user", content=text)]
    )
    return (await ctx.llm(request)).content.strip()


class Judge(Agent):
    """Opens the motion, keeps the transcript, rules once both sides made every argument."""

    name = "judge"
    topics = (FLOOR,)

    def __init__(self) -> None:
        self.motion = ""
        self.transcript: list[str] = []

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        body = msg.body
        if isinstance(body, Start):
            self.motion = str(body.data["motion"])
            ctx.publish(FLOOR, Note(text=self.motion, data={"round": 0}))
        elif isinstance(body, Note) and msg.sender in (Pro.name, Con.name):
            self.transcript.append(f"{msg.sender}: {body.text}")
            if len(self.transcript) == 2 * ROUNDS:
                debate = f"Motion: {self.motion}\n" + "\n".join(self.transcript)
                ruling = await ask(ctx, "judge", "Rule for pro or con; answer with one word.", debate)
                ctx.finish(ruling.lower())


class Debater(Agent):
    """Argues its side: after the motion and after each argument of the other side, until ROUNDS are made."""

    topics = (FLOOR,)
    side: ClassVar[str]
    opponent: ClassVar[str]

    def __init__(self) -> None:
        self.motion = ""
        self.made = 0

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        body = msg.body
        if not (isinstance(body, Note) and msg.topic == FLOOR) or self.made >= ROUNDS:
            return
        if msg.sender == Judge.name:
            self.motion = body.text
        if (msg.sender == Judge.name and self.side == "pro") or msg.sender == self.opponent:
            self.made += 1
            instruction = f"Argue {self.side} the motion in one sentence, answering your opponent."
            argument = await ask(ctx, self.side, instruction, f"Motion: {self.motion}\nOpponent: {body.text}")
            ctx.publish(FLOOR, Note(text=argument, data={"round": self.made}))


class Pro(Debater):
    name = "pro"
    side = "pro"
    opponent = "con"


class Con(Debater):
    name = "con"
    side = "con"
    opponent = "pro"


class Debate(System):
    name = "debate"
    agents = (Judge, Pro, Con)
    entry = "judge"
    finishers = ("judge",)
    needs = ("motion", "winner")

    def score(self, record: InputRecord, output: Any) -> Grade:
        expected = str(record.data["winner"])
        if str(output) == expected:
            return Grade(1.0)
        return Grade(0.0, f"the judge ruled for {output!r}, the record says {expected!r}")
