"""The built-in retail domain: an online store's orders, returns and exchanges."""

from faultline.envs.retail._domain import CANCEL_REASONS, Retail
from faultline.envs.retail._policy import POLICY

__all__ = ["CANCEL_REASONS", "POLICY", "Retail"]
