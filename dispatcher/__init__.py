"""Subscriptions, cursors and consumers: in-order delivery below the stable position.

Also the range fetch for stateless readers (raw entries plus the aborted list).
"""

from ._cursor import Cursor
from ._fetch import AbortedTxnRange, FetchedEntry, FetchResult, fetch, position_at
from ._message import Consumer, Isolation, Message, SubscriptionType, parse_enum
from ._policy import MAX_NACK_DELAY_MS, ConsumerPolicy, check_delay_ms
from ._registry import SubscriptionRegistry
from ._subscription import Subscription

__all__ = [
    "AbortedTxnRange",
    "Consumer",
    "ConsumerPolicy",
    "Cursor",
    "FetchResult",
    "FetchedEntry",
    "Isolation",
    "MAX_NACK_DELAY_MS",
    "Message",
    "Subscription",
    "SubscriptionRegistry",
    "SubscriptionType",
    "check_delay_ms",
    "fetch",
    "parse_enum",
    "position_at",
]
