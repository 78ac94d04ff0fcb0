"""Deadlines for client calls that may ignore their own timeout.

librdkafka 2.16 can block in coordinator requests past the timeout given to the call, e.g.
`send_offsets_to_transaction()` after the connections to the group coordinator were reset
(confluentinc/librdkafka#5456, #5511). Such a call runs in a helper thread; if it has not returned
`grace` seconds after its own timeout, the client is declared stuck (`StuckClientError`, fatal: the
caller replaces the client). A stuck client is parked, never destroyed: destroying a librdkafka handle
while a call is inside it is unsafe. A new producer with the same transactional id fences it, so it can
never commit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from transactions.errors import FatalKafkaError

__all__ = ["StuckClientError", "call_with_deadline", "park", "close_or_park"]

T = TypeVar("T")
_PARKED: list[Any] = []


class StuckClientError(FatalKafkaError):
    """A client call did not return within its deadline; the client must be replaced."""


def park(client: Any) -> None:
    """Keep a stuck client referenced for the life of the process."""
    _PARKED.append(client)


def close_or_park(consumer: Any, deadline: float = 10.0) -> None:
    """Close a consumer that is being dropped; park it if close() hangs. Other errors are ignored: closing a
    broken client must not hide the failure that had it dropped."""
    try:
        call_with_deadline("close consumer", consumer.close, deadline)
    except StuckClientError:
        park(consumer)
    except Exception:
        pass


def call_with_deadline(operation: str, fn: Callable[[], T], deadline: float) -> T:
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name=f"kafka-call-{operation}", daemon=True)
    thread.start()
    thread.join(deadline)
    if thread.is_alive():
        raise StuckClientError(f"{operation} did not return within {deadline:.0f}s (a librdkafka call that "
                               "ignores its timeout); the client is abandoned and replaced")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
