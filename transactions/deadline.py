"""Deadlines for client calls that may ignore their own timeout.

librdkafka 2.16 can block in coordinator requests past the timeout given to the call, e.g.
`send_offsets_to_transaction()` after the connections to the group coordinator were reset
(confluentinc/librdkafka#5456, #5511). Such a call runs in a helper thread; if it has not returned
`grace` seconds after its own timeout, the client is declared stuck (`StuckClientError`, fatal: the
caller replaces the client). A stuck client is parked, never destroyed: destroying a librdkafka handle
while a call is inside it is unsafe. A new producer with the same transactional id fences it, so it can
never commit.

The helper threads are kept: one that returned takes the next call, so that a call costs a hand-off rather
than a thread's start. A batch's commit makes two or three such calls in the window from its top-up to its
commit: a thread started per call added 0.4-0.5 ms to that window at the median on a local broker
(docs/measurements.md). A helper stuck in a call takes no other until that call returns, and a call that finds
no idle helper starts one: a `concurrent.futures.ThreadPoolExecutor` would queue a call behind its bounded
workers once enough of them were stuck, and declare a healthy client stuck.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
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


@dataclass
class _Call:
    operation: str
    fn: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None


#: The inboxes of the helper threads waiting for a call, the last to return last (a deque's ends are thread-safe)
_idle: collections.deque[queue.SimpleQueue[_Call]] = collections.deque()


def _forget_helpers() -> None:
    """In a forked child: the parent's helper threads do not exist there."""
    global _idle
    _idle = collections.deque()


os.register_at_fork(after_in_child=_forget_helpers)


def _serve(inbox: queue.SimpleQueue[_Call]) -> None:
    while True:
        call = inbox.get()
        threading.current_thread().name = f"kafka-call-{call.operation}"  # (what a stuck helper is stuck in)
        try:
            call.value = call.fn()
        except BaseException as exc:  # re-raised in the caller's thread
            call.error = exc
        _idle.append(inbox)  # (before `done`: the caller's next call may take this thread again)
        call.done.set()
        del call  # (nor keep its answer until the next)


def _helper() -> queue.SimpleQueue[_Call]:
    """The inbox of the helper that returned last, or of a new one."""
    try:
        return _idle.pop()
    except IndexError:
        inbox: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        threading.Thread(target=_serve, args=(inbox,), name="kafka-call", daemon=True).start()
        return inbox


def call_with_deadline(operation: str, fn: Callable[[], T], deadline: float) -> T:
    """`fn()` run by a helper thread; raises StuckClientError when it has not returned within `deadline`
    seconds (the helper stays in the call)."""
    call = _Call(operation, fn)
    _helper().put(call)
    if not call.done.wait(deadline):
        raise StuckClientError(f"{operation} did not return within {deadline:.0f}s (a librdkafka call that "
                               "ignores its timeout); the client is abandoned and replaced")
    if call.error is not None:
        raise call.error
    value: T = call.value
    return value
