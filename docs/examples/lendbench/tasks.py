"""Tasks by split: a hidden instruction for the user simulator, gold actions, outputs to tell."""

from __future__ import annotations

from typing import Any

TEST: list[dict[str, Any]] = [
    {
        "user_id": "m-ann",
        "annotator": 0,
        "instruction": "You are Ann Okafor (member m-ann). You want Dune held for you at the north branch for 7 days.",
        "actions": [
            {"name": "get_member_details", "kwargs": {"member_id": "m-ann"}},
            {
                "name": "place_hold",
                "kwargs": {"member_id": "m-ann", "book_id": "b-dune", "pickup": {"branch": "north", "hold_days": 7}},
            },
        ],
        "outputs": [],
    },
    {
        "user_id": "m-bob",
        "annotator": 1,
        "instruction": "You are Bob Lind (member m-bob). You lost the Book of Kells facsimile (loan L2). "
        "Report it and ask what it will cost you.",
        "actions": [
            {"name": "get_member_details", "kwargs": {"member_id": "m-bob"}},
            {"name": "report_lost", "kwargs": {"member_id": "m-bob", "loan_id": "L2"}},
        ],
        "outputs": ["1,240.50"],
    },
    {
        "user_id": "m-bob",
        "annotator": 0,
        "instruction": "You are Bob Lind. First give your member id as m-zed (you misremember it); when told it "
        "is wrong, give m-bob. You want loan L7 renewed.",
        "actions": [
            {"name": "get_member_details", "kwargs": {"member_id": "m-zed"}},
            {"name": "get_member_details", "kwargs": {"member_id": "m-bob"}},
            {"name": "renew_loans", "kwargs": {"member_id": "m-bob", "loan_ids": ["L7"], "options": {}}},
        ],
        "outputs": [],
    },
    {
        "user_id": "m-cy",
        "annotator": 1,
        "instruction": "You are Cy Park (member m-cy). You think your 40.00 fine is wrong and want a person to look "
        "at it.",
        "actions": [
            {"name": "get_member_details", "kwargs": {"member_id": "m-cy"}},
            {"name": "transfer_to_librarian", "kwargs": {"summary": "m-cy disputes a fine of 40.00"}},
        ],
        "outputs": [],
    },
]

TRAIN: list[dict[str, Any]] = [
    {
        "user_id": "m-ann",
        "annotator": 2,
        "instruction": "You are Ann Okafor (member m-ann). You want loan L1 renewed for three weeks.",
        "actions": [
            {"name": "get_member_details", "kwargs": {"member_id": "m-ann"}},
            {"name": "renew_loans", "kwargs": {"member_id": "m-ann", "loan_ids": ["L1"], "options": {"weeks": 3}}},
        ],
        "outputs": [],
    },
]

SPLITS = {"test": TEST, "train": TRAIN}

POLICY = """# Lending desk policy
You are the lending desk of the city library. Help members with holds, renewals and lost books.
- Find the member by their member id before anything else.
- Before a change (a hold, a renewal, a lost report), list what you will do and get an explicit yes.
- Disputes about fines go to a human librarian: transfer the member with a summary.
- Tell the member every amount you charge."""

USER_PROMPT = """You are a library member talking to the lending desk.

Instruction: {instruction}

Rules:
- Write one short line at a time; do not give the whole instruction at once.
- Never make up details the instruction does not give.
- When the instruction is fulfilled, or you have been transferred, reply ###STOP###."""
