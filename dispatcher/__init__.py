"""Subscriptions, cursors and consumers: in-order delivery below the stable position."""

from ._cursor import Cursor
from ._subscription import Consumer, Isolation, Message, Subscription, SubscriptionType, parse_enum

__all__ = [
    "Consumer",
    "Cursor",
    "Isolation",
    "Message",
    "Subscription",
    "SubscriptionType",
    "parse_enum",
]
