"""The phone domain: one device's Wi-Fi, login, contacts, messages and reminders.

Small on purpose: it shows that the `Domain` interface fits a world with no
users or orders, where device state gates what the tools may do.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Hashable, Iterable
from datetime import datetime
from typing import Any

from faultline._errors import ToolError
from faultline.envs._domain import Domain, tool
from faultline.envs._schema import arguments_schema
from faultline.envs._types import Action, Task, ToolSpec
from faultline.envs.phone import _preference, _tasks

OWNER = "Grace"
NOW = "2024-06-15 09:00"
CAPACITY = 10

_RULES = f"""\
- Log the device in before you use contacts, messages or reminders.
- Sending a message needs Wi-Fi; turn it on when it is off.
- The inbox holds at most {CAPACITY} messages, sent and received together. When it is full,
  delete only the message the user tells you to delete, then send.
- Never delete a message marked important, even when asked; tell the user it is important.
- Send messages only to saved contacts. Save a new contact only with the name and number
  the user gives.
- A reminder's time must be in the future; refuse one in the past and say it is in the past.
- Before you send, delete or save anything, tell the user what you will do and wait for a yes.
"""

POLICY = f"""\
# Phone assistant policy

You operate {OWNER}'s phone for her through the tools. It is now {NOW}.

{_RULES}"""

_OTHERS = " and ".join(user.title() for user in _preference.PREFERS if user.title() != OWNER)
SHARED_POLICY = f"""\
# Phone assistant policy

You operate the phone {OWNER} shares with {_OTHERS} through the tools. Each request starts with the
name of the person asking. It is now {NOW}.

{_RULES}- Two apps send a message: Messages (`send_message`) and Chat (`send_chat_message`), which also
  needs Wi-Fi and a saved contact, but no room in the inbox. Two note something for a time: Reminders
  (`add_reminder`) and Calendar (`add_calendar_event`), whose time must be in the future too. Each
  person prefers their own apps: use the ones the person asking wants.
"""

_CONTACTS = [
    ("Alice", "555-0102"), ("Bob", "555-0103"), ("Carol", "555-0104"), ("Dave", "555-0105"),
    ("Erin", "555-0106"), ("Frank", "555-0101"), ("Heidi", "555-0107"), ("Ivan", "555-0108"),
]  # fmt: skip
_MESSAGES = [
    (1, "Bob", OWNER, "Don't forget the team lunch on Friday.", "2024-05-02 12:10", 0),
    (2, "Carol", OWNER, "Here is the code for the storage unit: 4471.", "2024-05-05 08:30", 1),
    (3, OWNER, "Alice", "Can you send me the slides from yesterday?", "2024-05-09 17:45", 0),
    (4, "Alice", OWNER, "Sent! Check your email.", "2024-05-09 18:02", 0),
    (5, "Dave", OWNER, "Your lease renewal is due on July 1.", "2024-05-20 10:15", 1),
    (6, "Erin", OWNER, "Happy birthday! Hope you have a great day.", "2024-05-28 07:00", 0),
    (7, "Bob", OWNER, "The game starts at 7pm, see you there.", "2024-06-03 16:20", 0),
    (8, "Frank", OWNER, "I found your umbrella in my car.", "2024-06-10 19:05", 0),
    (9, "Heidi", OWNER, "Can we move our call to Thursday?", "2024-06-12 11:40", 0),
]
_REMINDERS = [
    (1, "Dentist appointment", "2024-06-20 14:00", "Bring the insurance card."),
    (2, "Pay electricity bill", "2024-06-18 09:00", "Due by the end of the day."),
    (3, "Call mom", "2024-06-16 18:00", ""),
]
_TIME = ("string", "Date and time as 'YYYY-MM-DD HH:MM', such as '2024-06-20 14:00'.")


TASK_SETS = ("standard", "preference")
"""`phone?tasks=...`: the standard tasks, or the preference tasks on the shared phone with its two more apps."""

_CHAT = ToolSpec(
    name=_preference.CHAT,
    description="Send a message to a saved contact with the Chat app; chats do not fill the inbox.",
    parameters=arguments_schema(receiver=("string", "Name of a saved contact."), text=("string", "The message text.")),
    writes=True,
)
_CALENDAR = ToolSpec(
    name=_preference.CALENDAR,
    description="Add an event to the Calendar app.",
    parameters=arguments_schema(
        ("description",), title=("string", "A short title."), time=_TIME, description=("string", "Optional notes.")
    ),
    writes=True,
)


class Phone(Domain):
    """A phone with Wi-Fi off, logged out, and an inbox one message short of full.

    `tasks="preference"` is the same phone shared by a household, with a Chat app beside Messages
    and a Calendar beside Reminders, and each member's requests (tagged `preference`). The
    standard phone keeps its tools and policy as they were, so its journals replay unchanged.
    """

    name = "phone"
    policy = POLICY

    def __init__(self, tasks: str = "standard") -> None:
        if tasks not in TASK_SETS:
            raise ValueError(f"phone has no task set {tasks!r}; it has {', '.join(TASK_SETS)}")
        self.shared = tasks == "preference"
        if self.shared:
            self.policy = SHARED_POLICY

    @property
    def data_key(self) -> Hashable:
        return "shared" if self.shared else ()

    def seed_database(self, db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE device (key TEXT PRIMARY KEY, value TEXT)")
        db.execute("CREATE TABLE contacts (name TEXT PRIMARY KEY, phone TEXT)")
        db.execute(
            "CREATE TABLE messages (id INTEGER PRIMARY KEY, sender TEXT, receiver TEXT, text TEXT, time TEXT,"
            " important INTEGER)"
        )
        db.execute("CREATE TABLE reminders (id INTEGER PRIMARY KEY, title TEXT, time TEXT, description TEXT)")
        db.executemany("INSERT INTO device VALUES (?, ?)", [("wifi", "off"), ("logged_in", "no")])
        db.executemany("INSERT INTO contacts VALUES (?, ?)", _CONTACTS)
        db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?)", _MESSAGES)
        db.executemany("INSERT INTO reminders VALUES (?, ?, ?, ?)", _REMINDERS)
        if self.shared:
            db.execute("CREATE TABLE chats (id INTEGER PRIMARY KEY, receiver TEXT, text TEXT, time TEXT)")
            db.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, title TEXT, time TEXT, description TEXT)")

    def tasks(self) -> list[Task]:
        return list(_preference.TASKS if self.shared else _tasks.TASKS)

    def registered_tools(self) -> Iterable[tuple[ToolSpec, Callable[..., Any]]]:
        """The shared phone's second apps (not `@tool` methods: the standard phone does not have them)."""
        if self.shared:
            yield _CHAT, self.send_chat_message
            yield _CALENDAR, self.add_calendar_event

    def mistake_candidates(self, task: Task, step: int, category: str) -> list[Action]:
        if self.shared:
            return _preference.mistake_candidates(task, step, category)
        return _tasks.mistake_candidates(task, step, category)

    # -- device -----------------------------------------------------------------------------

    @tool("Log the device in.", writes=True)
    def login_device(self, db: sqlite3.Connection) -> str:
        db.execute("UPDATE device SET value = 'yes' WHERE key = 'logged_in'")
        return "The device is logged in."

    @tool("Turn Wi-Fi on.", writes=True)
    def turn_on_wifi(self, db: sqlite3.Connection) -> str:
        db.execute("UPDATE device SET value = 'on' WHERE key = 'wifi'")
        return "Wi-Fi is on."

    @tool("Turn Wi-Fi off.", writes=True)
    def turn_off_wifi(self, db: sqlite3.Connection) -> str:
        db.execute("UPDATE device SET value = 'off' WHERE key = 'wifi'")
        return "Wi-Fi is off."

    @tool("Show whether Wi-Fi is on, whether the device is logged in, and how full the inbox is.")
    def get_device_status(self, db: sqlite3.Connection) -> dict[str, Any]:
        return {
            "wifi": _setting(db, "wifi") == "on",
            "logged_in": _setting(db, "logged_in") == "yes",
            "messages": db.execute("SELECT count(*) FROM messages").fetchone()[0],
            "capacity": CAPACITY,
        }

    # -- contacts ---------------------------------------------------------------------------

    @tool("List saved contacts with their phone numbers.")
    def list_contacts(self, db: sqlite3.Connection) -> dict[str, str]:
        _require_login(db)
        return {name: phone for name, phone in db.execute("SELECT name, phone FROM contacts ORDER BY name")}

    @tool(
        "Save a new contact.",
        writes=True,
        name=("string", "The contact's name."),
        phone=("string", "Phone number, such as '555-0123'."),
    )
    def add_contact(self, db: sqlite3.Connection, name: str, phone: str) -> str:
        _require_login(db)
        if db.execute("SELECT 1 FROM contacts WHERE lower(name) = lower(?)", (name,)).fetchone():
            raise ToolError(f"a contact named {name!r} already exists")
        db.execute("INSERT INTO contacts VALUES (?, ?)", (name.strip(), phone.strip()))
        return f"Contact {name} saved."

    # -- messages ---------------------------------------------------------------------------

    @tool(
        f"Send a text message from {OWNER} to a saved contact.",
        writes=True,
        receiver=("string", "Name of a saved contact."),
        text=("string", "The message text."),
    )
    def send_message(self, db: sqlite3.Connection, receiver: str, text: str) -> dict[str, Any]:
        contact = _reachable_contact(db, receiver)
        if db.execute("SELECT count(*) FROM messages").fetchone()[0] >= CAPACITY:
            raise ToolError(f"the inbox is full ({CAPACITY} messages); ask the user which message to delete")
        message_id = db.execute("SELECT coalesce(max(id), 0) + 1 FROM messages").fetchone()[0]
        db.execute("INSERT INTO messages VALUES (?, ?, ?, ?, ?, 0)", (message_id, OWNER, contact, text, NOW))
        return {"message_id": message_id, "status": f"Message sent to {contact}."}

    def send_chat_message(self, db: sqlite3.Connection, receiver: str, text: str) -> dict[str, Any]:
        contact = _reachable_contact(db, receiver)
        chat_id = db.execute("SELECT coalesce(max(id), 0) + 1 FROM chats").fetchone()[0]
        db.execute("INSERT INTO chats VALUES (?, ?, ?, ?)", (chat_id, contact, text, NOW))
        return {"chat_id": chat_id, "status": f"Chat message sent to {contact}."}

    @tool(
        "View messages, oldest first; with `contact`, only those to or from that contact.",
        optional=("contact",),
        contact=("string", "A contact's name."),
    )
    def view_messages(self, db: sqlite3.Connection, contact: str = "") -> list[dict[str, Any]]:
        _require_login(db)
        query = "SELECT id, sender, receiver, text, time, important FROM messages"
        params: tuple[str, ...] = ()
        if contact:
            query += " WHERE lower(sender) = lower(?) OR lower(receiver) = lower(?)"
            params = (contact.strip(), contact.strip())
        return [_message(row) for row in db.execute(query + " ORDER BY id", params)]

    @tool("Find messages whose text contains a keyword.", keyword=("string", "A word to look for."))
    def search_messages(self, db: sqlite3.Connection, keyword: str) -> list[dict[str, Any]]:
        _require_login(db)
        rows = db.execute(
            "SELECT id, sender, receiver, text, time, important FROM messages WHERE instr(lower(text), lower(?)) > 0"
            " ORDER BY id",
            (keyword.strip(),),
        )
        return [_message(row) for row in rows]

    @tool("Get the id of the oldest message in the inbox.")
    def get_earliest_message_id(self, db: sqlite3.Connection) -> int:
        return _edge_message(db, "min")

    @tool("Get the id of the newest message in the inbox.")
    def get_latest_message_id(self, db: sqlite3.Connection) -> int:
        return _edge_message(db, "max")

    @tool("Delete a message.", writes=True, message_id=("integer", "The message id."))
    def delete_message(self, db: sqlite3.Connection, message_id: int) -> str:
        _require_login(db)
        if db.execute("DELETE FROM messages WHERE id = ?", (message_id,)).rowcount == 0:
            raise ToolError(f"no message with id {message_id}")
        return f"Message {message_id} deleted."

    # -- reminders --------------------------------------------------------------------------

    @tool(
        "Add a reminder.",
        writes=True,
        optional=("description",),
        title=("string", "A short title."),
        time=_TIME,
        description=("string", "Optional notes."),
    )
    def add_reminder(self, db: sqlite3.Connection, title: str, time: str, description: str = "") -> dict[str, Any]:
        _require_login(db)
        _check_time(time)
        reminder_id = db.execute("SELECT coalesce(max(id), 0) + 1 FROM reminders").fetchone()[0]
        db.execute("INSERT INTO reminders VALUES (?, ?, ?, ?)", (reminder_id, title, time, description))
        return {"reminder_id": reminder_id, "status": f"Reminder {title!r} set for {time}."}

    def add_calendar_event(
        self, db: sqlite3.Connection, title: str, time: str, description: str = ""
    ) -> dict[str, Any]:
        _require_login(db)
        _check_time(time)
        event_id = db.execute("SELECT coalesce(max(id), 0) + 1 FROM events").fetchone()[0]
        db.execute("INSERT INTO events VALUES (?, ?, ?, ?)", (event_id, title, time, description))
        return {"event_id": event_id, "status": f"Event {title!r} added to the calendar for {time}."}

    @tool("List reminders, soonest first.")
    def view_reminders(self, db: sqlite3.Connection) -> list[dict[str, Any]]:
        _require_login(db)
        rows = db.execute("SELECT id, title, time, description FROM reminders ORDER BY time, id")
        return [{"reminder_id": i, "title": t, "time": when, "description": d} for i, t, when, d in rows]

    @tool("Delete a reminder.", writes=True, reminder_id=("integer", "The reminder id."))
    def delete_reminder(self, db: sqlite3.Connection, reminder_id: int) -> str:
        _require_login(db)
        if db.execute("DELETE FROM reminders WHERE id = ?", (reminder_id,)).rowcount == 0:
            raise ToolError(f"no reminder with id {reminder_id}")
        return f"Reminder {reminder_id} deleted."


def _setting(db: sqlite3.Connection, key: str) -> str:
    return str(db.execute("SELECT value FROM device WHERE key = ?", (key,)).fetchone()[0])


def _require_login(db: sqlite3.Connection) -> None:
    if _setting(db, "logged_in") != "yes":
        raise ToolError("the device is not logged in; call login_device first")


def _reachable_contact(db: sqlite3.Connection, receiver: str) -> str:
    """The saved contact's name as stored, once the device can send to it."""
    _require_login(db)
    if _setting(db, "wifi") != "on":
        raise ToolError("Wi-Fi is off; turn it on before sending")
    row = db.execute("SELECT name FROM contacts WHERE lower(name) = lower(?)", (receiver.strip(),)).fetchone()
    if row is None:
        raise ToolError(f"{receiver!r} is not a saved contact")
    return str(row[0])


def _check_time(time: str) -> None:
    try:
        datetime.strptime(time, "%Y-%m-%d %H:%M")
    except ValueError:
        raise ToolError(f"time {time!r} is not in the form 'YYYY-MM-DD HH:MM'") from None


def _edge_message(db: sqlite3.Connection, which: str) -> int:
    _require_login(db)
    row = db.execute(f"SELECT {which}(id) FROM messages").fetchone()
    if row[0] is None:
        raise ToolError("the inbox is empty")
    return int(row[0])


def _message(row: tuple[Any, ...]) -> dict[str, Any]:
    message_id, sender, receiver, text, time, important = row
    return {
        "message_id": message_id,
        "sender": sender,
        "receiver": receiver,
        "text": text,
        "time": time,
        "important": bool(important),
    }
