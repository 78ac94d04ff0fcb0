"""The one retry policy: retry only what the taxonomy calls retriable, with jittered exponential backoff,
bounded by attempts and by time. Every Kafka call of the framework goes through `call`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog
from confluent_kafka import KafkaException
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

from transactions.errors import RetriableKafkaError, classify

__all__ = ["RetryPolicy", "DEFAULT_POLICY", "call"]

T = TypeVar("T")
log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 8
    max_seconds: float = 120.0
    initial_backoff: float = 0.05
    max_backoff: float = 2.0

    def retrying(self) -> Retrying:
        return Retrying(
            retry=retry_if_exception_type(RetriableKafkaError),
            stop=stop_after_attempt(self.attempts) | stop_after_delay(self.max_seconds),
            wait=wait_exponential_jitter(multiplier=self.initial_backoff, max=self.max_backoff,
                                         jitter=self.initial_backoff),
            before_sleep=_log_retry,
            reraise=True,
        )


DEFAULT_POLICY = RetryPolicy()


def call(operation: str, fn: Callable[..., T], *args: object, policy: RetryPolicy = DEFAULT_POLICY,
         **kwargs: object) -> T:
    """Run `fn(*args, **kwargs)`; client errors are classified, and retriable ones retried with the same
    arguments. Raises the classified error when it is not retriable or the policy is exhausted."""

    def attempt() -> T:
        try:
            return fn(*args, **kwargs)
        except KafkaException as exc:
            raise classify(exc, operation) from exc

    return policy.retrying()(attempt)


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    log.warning("retrying kafka call", attempt=state.attempt_number, error=str(exc))
