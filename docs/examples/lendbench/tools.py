"""The desk's tools: each answers a string, and "Error: ..." when it refuses."""

from __future__ import annotations

import datetime
import json
from typing import Any


class GetMemberDetails:
    @staticmethod
    def invoke(data: dict[str, Any], member_id: str) -> str:
        member = data["members"].get(member_id)
        if member is None:
            return "Error: member not found"
        loans = {k: v for k, v in data["loans"].items() if v["member"] == member_id}
        return json.dumps({**member, "loans": loans})

    @staticmethod
    def get_info() -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": "get_member_details",
                "description": "Get a member's details and loans.",
                "parameters": {
                    "type": "object",
                    "properties": {"member_id": {"type": "string", "description": "Such as 'm-ann'."}},
                    "required": ["member_id"],
                },
            },
        }


class PlaceHold:
    @staticmethod
    def invoke(data: dict[str, Any], member_id: str, book_id: str, pickup: dict[str, Any]) -> str:
        member, book = data["members"].get(member_id), data["books"].get(book_id)
        if member is None or book is None:
            return "Error: member or book not found"
        member["holds"].append({"book": book_id, **pickup})
        return json.dumps(member["holds"])

    @staticmethod
    def get_info() -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": "place_hold",
                "description": "Hold a book for a member at a branch.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "member_id": {"type": "string"},
                        "book_id": {"type": "string"},
                        "pickup": {
                            "type": "object",
                            "properties": {
                                "branch": {"type": "string", "enum": ["north", "south", "harbour"]},
                                "hold_days": {"type": "integer", "minimum": 1, "maximum": 14},
                            },
                            "required": ["branch"],
                            "additionalProperties": False,
                        },
                    },
                    "required": ["member_id", "book_id", "pickup"],
                },
            },
        }


class RenewLoans:
    @staticmethod
    def invoke(data: dict[str, Any], member_id: str, loan_ids: list[str], options: dict[str, Any]) -> str:
        options.setdefault("weeks", 2)  # fills in its own argument, as such code does
        for loan_id in loan_ids:
            loan = data["loans"].get(loan_id)
            if loan is None or loan["member"] != member_id:
                return f"Error: loan {loan_id} is not this member's"
            due = datetime.date.fromisoformat(loan["due"]) + datetime.timedelta(weeks=options["weeks"])
            loan.update(due=due.isoformat(), renewals=loan["renewals"] + 1)
        return json.dumps({k: data["loans"][k]["due"] for k in loan_ids})

    @staticmethod
    def get_info() -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": "renew_loans",
                "description": "Renew loans of a member.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "member_id": {"type": "string"},
                        "loan_ids": {"type": "array", "items": {"type": "string"}},
                        "options": {"type": "object", "properties": {"weeks": {"type": "integer"}}},
                    },
                    "required": ["member_id", "loan_ids", "options"],
                },
            },
        }


class ReportLost:
    @staticmethod
    def invoke(data: dict[str, Any], member_id: str, loan_id: str) -> str:
        loan = data["loans"].get(loan_id)
        if loan is None or loan["member"] != member_id:
            return "Error: no such loan for this member"
        cost = data["books"][loan["book"]]["cost"]
        data["members"][member_id]["fines"] += cost
        data["books"][loan["book"]]["copies"] -= 1
        del data["loans"][loan_id]
        return f"Recorded as lost; replacement cost {cost:,.2f} added to the fines."

    @staticmethod
    def get_info() -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": "report_lost",
                "description": "Record a loaned book as lost and charge its replacement cost.",
                "parameters": {
                    "type": "object",
                    "properties": {"member_id": {"type": "string"}, "loan_id": {"type": "string"}},
                    "required": ["member_id", "loan_id"],
                },
            },
        }


class TransferToLibrarian:
    @staticmethod
    def invoke(data: dict[str, Any], summary: str) -> str:
        return "Transfer successful"

    @staticmethod
    def get_info() -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": "transfer_to_librarian",
                "description": "Hand the member to a human librarian, with a summary of the case.",
                "parameters": {
                    "type": "object",
                    "properties": {"summary": {"type": "string"}},
                    "required": ["summary"],
                },
            },
        }


ALL_TOOLS = [GetMemberDetails, PlaceHold, RenewLoans, ReportLost, TransferToLibrarian]
