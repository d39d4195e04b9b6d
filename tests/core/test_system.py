"""Systems of one's own: what `load_system` refuses, how inputs files are read, and what a scorer's failure does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from faultline._errors import ConfigError, PluginError
from faultline.agents import Scorer
from faultline.core import (
    Agent,
    Context,
    Envelope,
    Grade,
    InputRecord,
    Recorder,
    Start,
    System,
    load_system,
    read_inputs,
)
from faultline.testing import SystemHarness


class Solo(Agent):
    name = "solo"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            ctx.finish(msg.body.data.get("say", ""))


class Echo(System):
    agents = (Solo,)
    entry = "solo"
    finishers = ("solo",)
    needs = ("say",)

    def score(self, record: InputRecord, output: Any) -> Grade:
        return Grade(1.0) if output == record.data["say"] else Grade(0.0, "said something else")


class NoFinisher(Echo):
    finishers = ()


class StrangeEntry(Echo):
    entry = "nobody"


class StrangeFinisher(Echo):
    finishers = ("solo", "ghost")


class Twice(Echo):
    agents = (Solo, Solo)


class NamedScorer(Echo):
    class Scorer(Solo):
        name = "scorer"

    agents = (Scorer,)
    entry = "scorer"
    finishers = ("scorer",)


class Raising(Echo):
    def score(self, record: InputRecord, output: Any) -> Grade:
        raise ValueError("no grade for you")


class Misgraded(Echo):
    def score(self, record: InputRecord, output: Any) -> Grade:
        return 1.0  # type: ignore[return-value]


class Nameless(Agent):
    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        pass


class WithNameless(Echo):
    agents = (Solo, Nameless)


class WithNotAnAgent(Echo):
    agents = (Solo, Echo)  # type: ignore[assignment]


NotASystem = Solo


def path(cls: type) -> str:
    return f"{__name__}:{cls.__qualname__}"


@pytest.mark.parametrize(
    ("cls", "why"),
    [
        (NoFinisher, "no agent can finish its episodes: set finishers = ("),
        (StrangeEntry, "its entry 'nobody' is not one of its agents (solo)"),
        (StrangeFinisher, "its finisher 'ghost' is not one of its agents (solo)"),
        (Twice, "two of its agents are named 'solo'"),
        (NamedScorer, "'scorer' is the runtime's own agent, which grades episodes"),
        (NotASystem, "class Solo is not a faultline System subclass"),
        (WithNameless, "its agent Nameless has no name: set name = '...' on the class"),
        (WithNotAnAgent, "its agents must be Agent subclasses with a name, not <class 'tests.core.test_system.Echo'>"),
    ],
)
def test_a_system_that_cannot_run_is_one_line_naming_why(cls: type, why: str) -> None:
    with pytest.raises(PluginError) as caught:
        load_system(path(cls))
    assert str(caught.value).startswith(f"cannot load system {path(cls)!r}: ")
    assert why in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_built_in_system_is_registered_and_completed_by_its_environment() -> None:
    ref = load_system("tool-use")
    assert ref.agent_names == ("env", "tool", "user")
    assert not ref.is_user_system
    assert load_system(path(Echo)).agent_names == ("solo", "scorer")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"say": "a"}\n{"say": \n', "inputs.jsonl:2: not a JSON object (Expecting value at column 9)"),
        ('{"say": "a"}\n[1, 2]\n', "inputs.jsonl:2: each line must be a JSON object, not a list"),
        (
            '{"id": "x", "say": "a"}\n\n{"id": "x", "say": "b"}\n',
            "inputs.jsonl:3: id 'x' is also on line 1: ids must differ",
        ),
        ('{"say": "a"}\n{"said": "b"}\n', "inputs.jsonl:2: the record has no 'say', which the system needs"),
        ("\n\n", "inputs.jsonl: no input records (one JSON object a line)"),
        (None, "inputs.jsonl: no such inputs file"),
    ],
)
def test_a_bad_inputs_file_is_one_line_naming_the_file_and_line(tmp_path: Path, text: str | None, error: str) -> None:
    inputs = tmp_path / "inputs.jsonl"
    if text is not None:
        inputs.write_text(text)
    with pytest.raises(ConfigError) as caught:
        read_inputs(inputs, needs=("say",))
    assert str(caught.value) == f"{tmp_path}/{error}"


def test_records_take_their_id_or_their_line(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text('{"say": "a"}\n\n{"id": 7, "say": "b"}\n{"say": "c"}\n')
    assert [r.id for r in read_inputs(inputs)] == ["1", "7", "4"]


async def test_a_scorer_that_raises_or_returns_no_grade_ends_its_episode_in_error() -> None:
    raised = await SystemHarness(path(Raising)).run({"say": "hi"})
    assert raised.completed is not None
    assert (raised.completed.outcome, raised.completed.cause) == (
        "error",
        "the scorer raised ValueError: no grade for you",
    )
    misgraded = await SystemHarness(path(Misgraded)).run({"say": "hi"})
    assert misgraded.completed is not None and misgraded.completed.outcome == "error"
    assert "score returned a float, not a Grade" in misgraded.completed.cause


async def test_the_scorer_grades_the_first_finish_of_a_finisher() -> None:
    done = await SystemHarness(Echo).run({"say": "hello"})
    assert done.completed is not None and (done.completed.outcome, done.completed.reward) == ("success", 1.0)
    assert done.completed.details == {"system": "system", "input": "1"}


class Eager(Agent):
    """Tries to finish an episode it may not finish, then asks the finisher."""

    name = "eager"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            ctx.finish("forged")
            ctx.send("solo", Start(data={"say": "real"}))


class Guarded(Echo):
    agents = (Eager, Solo)
    entry = "eager"

    def score(self, record: InputRecord, output: Any) -> Grade:
        return Grade(1.0) if output == "real" else Grade(0.0, f"graded {output!r}")


async def test_a_finish_from_an_agent_that_is_not_a_finisher_is_ignored() -> None:
    done = await SystemHarness(path(Guarded)).run({"say": "x"})
    assert done.completed is not None and done.completed.outcome == "success"
    assert [m.sender for m in done.messages if m.kind == "finished"] == ["eager", "solo"]


async def test_a_second_start_to_the_scorer_is_ignored() -> None:
    """A broadcast of the entry's Start also reaches the scorer; it keeps the runner's."""
    harness = SystemHarness(Echo)
    done = await harness.run({"say": "hi"})
    assert done.completed is not None and done.completed.outcome == "success"
    scorer = Scorer()
    runner_start = next(m for m in done.messages if m.recipient == "scorer" and m.kind == "start")
    await scorer.on_message(
        runner_start,
        Context(agent="scorer", message=runner_start, recorder=Recorder(services=harness), services=harness),
    )
    stray = msgspec.structs.replace(runner_start, sender="solo", body=Start(data={"say": "hi"}))
    await scorer.on_message(
        stray, Context(agent="scorer", message=stray, recorder=Recorder(services=harness), services=harness)
    )
    assert scorer.start is not None and scorer.start.input.data == {"say": "hi"}
