"""The built-in phone domain: Wi-Fi, login, contacts, messages and reminders on one device.

`phone?tasks=preference` is the same device shared by three people with their own preferred apps.
"""

from faultline.envs.phone._domain import CAPACITY, POLICY, Phone

__all__ = ["CAPACITY", "POLICY", "Phone"]
