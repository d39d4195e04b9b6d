"""The preference tasks: a phone its household shares, two apps for each of two jobs, and who wants which.

As in PEToolBench, a request never says which app to use. The ground truth
uses the app the person asking prefers, and the other app is the plausible
mistake, so only what that person rated in earlier episodes tells them apart.
"""

from __future__ import annotations

from faultline.envs._types import WRONG_ENTITY, WRONG_VALUE, Action, Task
from faultline.envs.phone._tasks import LOGIN, WIFI, hour_later, shorter_text

MESSAGES, CHAT = "send_message", "send_chat_message"
REMINDERS, CALENDAR = "add_reminder", "add_calendar_event"
OTHER_APP = {MESSAGES: CHAT, CHAT: MESSAGES, REMINDERS: CALENDAR, CALENDAR: REMINDERS}
"""Each app and the one that does the same job: a call of either takes the same arguments."""

PREFERS = {"grace": (MESSAGES, REMINDERS), "tom": (CHAT, CALENDAR), "mia": (MESSAGES, CALENDAR)}
"""Each user's apps. Every app is one user's choice and another's 0 rating, so what is hidden is per user."""

TAG = "preference"
"""The tag that makes a task personalised tool use for the memory (`faultline.agents.memory.PREFERENCE_TAG`)."""


_SENDS = {
    "grace": [("Bob", "Count me in for the game on Saturday."), ("Carol", "I will pick up the keys at noon.")],
    "tom": [("Dave", "The car is ready for pickup."), ("Frank", "Thanks for the ride home.")],
    "mia": [("Erin", "Movie night at my place on Friday?"), ("Heidi", "I left my jacket at your house.")],
}
_NOTES = {
    "grace": [("Renew passport", "2024-06-25 09:00"), ("Yoga class", "2024-06-18 18:30")],
    "tom": [("Football practice", "2024-06-19 17:00"), ("Science fair", "2024-06-21 10:00")],
    "mia": [("Piano lesson", "2024-06-20 16:00"), ("Library books due", "2024-06-24 12:00")],
}
_ASK_TO_SEND = ("Message {receiver}: '{text}'", "Send {receiver} '{text}'")
_ASK_TO_NOTE = ("Put '{title}' down for {time}.", "Add '{title}' for {time}.")


def _task(user: str, kind: str, number: int, instruction: str, actions: list[Action]) -> Task:
    return Task(
        id=f"{user}-{kind}-{number:02d}",
        instruction=f"{user.title()} here. {instruction}",
        actions=actions,
        tags=["phone", TAG, kind],
        extra={"user_id": user},
    )


def _rounds() -> list[Task]:
    """Each user's requests in turn, so a run of the first three gives every user one rated message."""
    tasks: list[Task] = []
    for number, (send, note) in enumerate(zip(_ASK_TO_SEND, _ASK_TO_NOTE, strict=True)):
        for user, (app, _) in PREFERS.items():
            receiver, text = _SENDS[user][number]
            call = Action(name=app, arguments={"receiver": receiver, "text": text})
            tasks.append(_task(user, "send", number, send.format(receiver=receiver, text=text), [LOGIN, WIFI, call]))
        for user, (_, app) in PREFERS.items():
            title, time = _NOTES[user][number]
            call = Action(name=app, arguments={"title": title, "time": time})
            tasks.append(_task(user, "schedule", number, note.format(title=title, time=time), [LOGIN, call]))
    return tasks


TASKS = _rounds()


def mistake_candidates(task: Task, step: int, category: str) -> list[Action]:
    """The other app with the same arguments (the user's unwanted tool), or the right app with a misread value."""
    if step >= len(task.actions) or task.actions[step].name not in OTHER_APP:
        return []
    action = task.actions[step]
    args = action.arguments
    if category == WRONG_ENTITY:
        return [Action(name=OTHER_APP[action.name], arguments=dict(args))]
    if category == WRONG_VALUE and "text" in args:
        return [Action(name=action.name, arguments={**args, "text": shorter_text(str(args["text"]))})]
    if category == WRONG_VALUE:
        return [Action(name=action.name, arguments={**args, "time": hour_later(str(args["time"]))})]
    return []
