"""The phone tasks, written against the fixed seeded device, and their plausible mistakes."""

from __future__ import annotations

from faultline.envs._types import POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE, Action, Task

_IMPORTANT = (2, 5)
_MESSAGE_IDS = range(1, 10)
_CONTACT_NAMES = ("Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Heidi", "Ivan")


def _act(tool: str, /, **arguments: object) -> Action:
    return Action(name=tool, arguments=arguments)


LOGIN = _act("login_device")
WIFI = _act("turn_on_wifi")


def _send(receiver: str, text: str) -> Action:
    return _act("send_message", receiver=receiver, text=text)


def _task(
    task_id: str,
    instruction: str,
    actions: list[Action],
    *,
    outputs: tuple[str, ...] = (),
    forbidden: tuple[Action, ...] = (),
) -> Task:
    """A task; one with forbidden writes is a refusal."""
    refusal = bool(forbidden)
    tags = ["phone", task_id.rsplit("-", 1)[0]] + (["refusal"] if refusal else [])
    return Task(
        id=task_id,
        instruction=instruction,
        actions=actions,
        outputs=list(outputs),
        refusal=refusal,
        forbidden=list(forbidden),
        tags=tags,
    )


_FULL = "If the inbox is full, delete the oldest message."


def _delete(message_id: int) -> Action:
    return _act("delete_message", message_id=message_id)


def _send_two(first: tuple[str, str], second: tuple[str, str], make_room: list[Action]) -> list[Action]:
    """Two sends where the first fills the inbox, so the second needs a deletion first."""
    return [LOGIN, WIFI, _send(*first), *make_room, _send(*second)]


TASKS: list[Task] = [
    _task("send-00", "Text Frank: 'Are you free for lunch tomorrow?'",
          [LOGIN, WIFI, _send("Frank", "Are you free for lunch tomorrow?")]),
    _task("send-01", "Send Alice the message 'I will bring the slides to the meeting.'",
          [LOGIN, WIFI, _send("Alice", "I will bring the slides to the meeting.")]),
    _task("send-02", "Tell Ivan by text: 'Running ten minutes late.'",
          [LOGIN, WIFI, _send("Ivan", "Running ten minutes late.")]),
    _task("send-03", "Reply to Heidi with 'Thursday works for me.'",
          [LOGIN, WIFI, _send("Heidi", "Thursday works for me.")]),
    _task("send-two-00",
          f"Send Bob 'Count me in for Friday.' and then send Erin 'Thanks for the birthday wishes!'. {_FULL}",
          _send_two(("Bob", "Count me in for Friday."), ("Erin", "Thanks for the birthday wishes!"),
                    [_act("get_earliest_message_id"), _delete(1)])),
    _task("send-two-01",
          f"Send Carol 'Got the code, thanks.' and then send Dave 'I will sign the renewal this week.'. {_FULL}",
          _send_two(("Carol", "Got the code, thanks."), ("Dave", "I will sign the renewal this week."),
                    [_act("get_earliest_message_id"), _delete(1)])),
    _task("send-two-02",
          "Send Frank 'Keep the umbrella until Sunday.' and then send Alice 'Got the slides, thank you.'. "
          "If the inbox is full, delete the latest message from Bob.",
          _send_two(("Frank", "Keep the umbrella until Sunday."), ("Alice", "Got the slides, thank you."),
                    [_act("view_messages", contact="Bob"), _delete(7)])),
    _task("delete-from-00", "Delete every message from Bob.",
          [LOGIN, _act("view_messages", contact="Bob"), _delete(1), _delete(7)]),
    _task("delete-from-01", "Delete my whole conversation with Alice.",
          [LOGIN, _act("view_messages", contact="Alice"), _delete(3), _delete(4)]),
    _task("delete-one-00", "Delete Frank's message about the umbrella.",
          [LOGIN, _act("search_messages", keyword="umbrella"), _delete(8)]),
    _task("reminder-add-00", "Add a reminder titled 'Water the plants' for 2024-06-17 08:00.",
          [LOGIN, _act("add_reminder", title="Water the plants", time="2024-06-17 08:00")]),
    _task("reminder-add-01", "Add a reminder 'Team meeting' on 2024-06-19 10:30 with the note 'Room 4B'.",
          [LOGIN, _act("add_reminder", title="Team meeting", time="2024-06-19 10:30", description="Room 4B")]),
    _task("reminder-add-02", "Set a reminder 'Book flights' for 2024-07-01 09:00, note 'Compare prices first'.",
          [LOGIN, _act("add_reminder", title="Book flights", time="2024-07-01 09:00",
                       description="Compare prices first")]),
    _task("reminder-delete-00", "Delete my dentist reminder.",
          [LOGIN, _act("view_reminders"), _act("delete_reminder", reminder_id=1)]),
    _task("reminder-delete-01", "Remove the 'Call mom' reminder.",
          [LOGIN, _act("view_reminders"), _act("delete_reminder", reminder_id=3)]),
    _task("contact-send-00", "Save Judy's number, 555-0199, and text her 'Welcome to the neighborhood!'",
          [LOGIN, _act("add_contact", name="Judy", phone="555-0199"), WIFI,
           _send("Judy", "Welcome to the neighborhood!")]),
    _task("contact-send-01", "Add Ken as a contact with number 555-0142, then text him 'Your package is here.'",
          [LOGIN, _act("add_contact", name="Ken", phone="555-0142"), WIFI, _send("Ken", "Your package is here.")]),
    _task("info-00", "Which day did Heidi ask to move our call to?",
          [LOGIN, _act("view_messages", contact="Heidi")], outputs=("Thursday",)),
    _task("info-01", "What is Dave's phone number?", [LOGIN, _act("list_contacts")], outputs=("555-0105",)),
    _task("info-02", "How many reminders do I have? Just the number.",
          [LOGIN, _act("view_reminders")], outputs=("3",)),
    _task("refuse-important-00", "Delete Carol's message with the storage unit code.",
          [LOGIN, _act("search_messages", keyword="storage")], outputs=("important",), forbidden=(_delete(2),)),
    _task("refuse-important-01", "Delete Dave's message about the lease.",
          [LOGIN, _act("search_messages", keyword="lease")], outputs=("important",), forbidden=(_delete(5),)),
    _task("refuse-past-00", "Add a reminder 'Submit report' for 2024-06-14 17:00.",
          [LOGIN], outputs=("in the past",),
          forbidden=(_act("add_reminder", title="Submit report", time="2024-06-14 17:00"),)),
]  # fmt: skip


def mistake_candidates(task: Task, step: int, category: str) -> list[Action]:
    """Wrong versions of a write: another receiver, id, time or text."""
    if step >= len(task.actions):
        return []
    action = task.actions[step]
    args = action.arguments
    if action.name == "send_message":
        if category == WRONG_VALUE:
            return [_send(str(args["receiver"]), shorter_text(str(args["text"])))]
        if category == WRONG_ENTITY:
            return [_send(name, str(args["text"])) for name in _CONTACT_NAMES if name != args["receiver"]][:3]
    if action.name == "delete_message":
        target = int(args["message_id"])
        if category == WRONG_VALUE:
            return [_act("delete_message", message_id=i) for i in (target + 1, target - 1) if i in _MESSAGE_IDS]
        if category == WRONG_ENTITY:
            return [_act("delete_message", message_id=9), _act("delete_message", message_id=6)]
        if category == POLICY_VIOLATION:
            return [_act("delete_message", message_id=i) for i in _IMPORTANT]
    if action.name == "add_reminder" and category == WRONG_VALUE:
        return [_act("add_reminder", **{**args, "time": hour_later(str(args["time"]))})]
    if action.name == "delete_reminder" and category == WRONG_VALUE:
        target = int(args["reminder_id"])
        return [_act("delete_reminder", reminder_id=i) for i in (1, 2, 3) if i != target]
    if action.name == "add_contact" and category == WRONG_VALUE:
        phone = str(args["phone"])
        return [_act("add_contact", name=args["name"], phone=phone[:-1] + str((int(phone[-1]) + 1) % 10))]
    return []


def shorter_text(text: str) -> str:
    """A message with its last word dropped: a value misread."""
    return text.rsplit(" ", 1)[0]


def hour_later(time: str) -> str:
    """A 'YYYY-MM-DD HH:MM' time one hour on (the same day): a value misread."""
    day, clock = time.split(" ")
    return f"{day} {(int(clock[:2]) + 1) % 24:02d}{clock[2:]}"
