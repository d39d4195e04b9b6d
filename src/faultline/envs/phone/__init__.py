"""The built-in phone domain: Wi-Fi, login, contacts, messages and reminders on one device."""

from faultline.envs.phone._domain import CAPACITY, POLICY, Phone

__all__ = ["CAPACITY", "POLICY", "Phone"]
