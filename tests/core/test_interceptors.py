"""The interceptor chain: order, pass, change, drop, multiply, side events, and which hooks run."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from faultline.core import Envelope, Inbound, Interceptor, InterceptorChain, Note, Outbound


def note(i: str, text: str = "hi") -> Envelope:
    return Envelope(id=i, episode="e1", sender="alpha", recipient="beta", body=Note(text=text))


class Tag(Interceptor):
    """Appends its letter to every message's text on the way out and in, and counts its calls."""

    def __init__(self, letter: str) -> None:
        self.letter = letter
        self.calls = 0

    def _tagged(self, env: Envelope) -> Envelope:
        assert isinstance(env.body, Note)
        self.calls += 1
        return msgspec.structs.replace(env, body=Note(text=env.body.text + self.letter))

    async def outbound(self, message: Outbound) -> Sequence[Envelope]:
        return (self._tagged(message.envelope),)

    async def inbound(self, message: Inbound) -> Sequence[Envelope]:
        return [self._tagged(message.envelope)]


class Twice(Interceptor):
    """Sends every message twice under new ids, with a side event per copy, and drops id `drop`."""

    def __init__(self, drop: str = "") -> None:
        self.drop = drop
        self.kept: list[Envelope] = []

    async def outbound(self, message: Outbound) -> Sequence[Envelope]:
        env = message.envelope
        if env.id == self.drop:
            return ()
        copies = [msgspec.structs.replace(env, id=f"{env.id}/{n}") for n in range(2)]
        message.events.extend(note(f"event-{c.id}") for c in copies)
        self.kept = copies
        return self.kept


class Watch(Interceptor):
    """Sees inbound messages only: its outbound hook is the inherited pass-through."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int]] = []

    async def inbound(self, message: Inbound) -> Sequence[Envelope]:
        self.seen.append((message.envelope.id, message.agent, message.stream_seq))
        return (message.envelope,)


def texts(messages: Sequence[Envelope]) -> list[str]:
    return [m.body.text for m in messages if isinstance(m.body, Note)]


async def test_each_interceptor_sees_what_the_one_before_let_through_in_order() -> None:
    chain = InterceptorChain([Tag("a"), Twice(), Tag("b")])
    messages, events = await chain.outbound(note("m"))
    assert [m.id for m in messages] == ["m/0", "m/1"]
    assert texts(messages) == ["hiab", "hiab"]
    assert [e.id for e in events] == ["event-m/0", "event-m/1"]


async def test_a_dropped_message_goes_no_further() -> None:
    last = Tag("z")
    chain = InterceptorChain([Twice(drop="m"), last])
    assert await chain.outbound(note("m")) == ([], [])
    assert last.calls == 0


async def test_what_a_hook_returned_is_not_changed_by_the_hook_changing_its_list_later() -> None:
    twice = Twice()
    messages, _ = await InterceptorChain([Tag("a"), twice]).outbound(note("m"))
    twice.kept.clear()
    assert [m.id for m in messages] == ["m/0", "m/1"]
    assert texts(messages) == ["hia", "hia"]


async def test_inbound_hooks_get_the_agent_and_stream_sequence() -> None:
    watch = Watch()
    chain = InterceptorChain([Tag("a"), watch, Tag("b")])
    messages, events = await chain.inbound(note("m"), "beta", 7)
    assert texts(messages) == ["hiab"]
    assert events == []
    assert watch.seen == [("m", "beta", 7)]


async def test_inherited_pass_through_hooks_do_not_count_as_rewriting() -> None:
    chain = InterceptorChain([Interceptor(), Watch()])
    assert len(chain) == 2
    assert not chain.rewrites_outbound
    assert await chain.outbound(note("m")) == ([note("m")], [])
    assert not InterceptorChain().rewrites_outbound


async def test_adding_and_removing_an_interceptor_changes_what_runs() -> None:
    chain = InterceptorChain([Watch()])
    tag = Tag("x")
    chain.add(tag)
    assert chain.rewrites_outbound
    assert texts((await chain.outbound(note("m")))[0]) == ["hix"]
    chain.remove(tag)
    assert not chain.rewrites_outbound
    assert texts((await chain.outbound(note("m")))[0]) == ["hi"]
    assert tag.calls == 1
