"""Circuit breaker states and admission gate (a fake clock; the process-level behaviour is in
test_worker_faults.py)."""

from __future__ import annotations

import time

import pytest

from ragspine_services.common.breaker import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    Admission,
    AdmissionRefusedError,
    CircuitBreaker,
    CircuitOpenError,
)
from ragspine_services.common.deadline import answer_deadline, call_deadline, stage_budget


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_consecutive_failures_then_probes_and_closes() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=3, open_s=0.5, clock=clock)
    for _ in range(2):
        assert breaker.before_call() is False
        breaker.record_failure()
    breaker.record_success()  # a success resets the count
    for _ in range(3):
        breaker.before_call()
        breaker.record_failure()
    assert breaker.state == OPEN
    with pytest.raises(CircuitOpenError, match="next probe"):
        breaker.before_call()
    clock.now = 0.5
    assert breaker.state == HALF_OPEN
    assert breaker.before_call() is True  # the one probe
    with pytest.raises(CircuitOpenError):
        breaker.before_call()  # others still refused while it runs
    breaker.record_failure(probe=True)
    assert breaker.state == OPEN
    clock.now = 1.0
    assert breaker.before_call() is True
    breaker.record_success(probe=True)
    assert breaker.state == CLOSED and breaker.opened_count == 2
    assert breaker.before_call() is False


def test_a_timed_out_call_opens_the_breaker_at_once() -> None:
    breaker = CircuitBreaker(failure_threshold=3, open_s=0.5, clock=Clock())
    breaker.record_failure(trip=True)
    assert breaker.state == OPEN


def test_a_released_probe_lets_the_next_call_probe() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, open_s=0.1, clock=clock)
    breaker.record_failure()
    clock.now = 0.2
    assert breaker.before_call() is True
    breaker.release_probe()
    assert breaker.before_call() is True


def test_admission_sheds_when_full_and_while_a_call_hangs() -> None:
    gate = Admission(1, hang_floor_s=10.0)
    ticket = gate.acquire(0.01)
    with pytest.raises(AdmissionRefusedError, match="in flight"):
        gate.acquire(0.01)
    gate.release(ticket, 0.002)
    assert gate.latency_s == pytest.approx(0.002)
    hung = Admission(4, hang_floor_s=0.0, hang_factor=0.0)
    hung.acquire(1.0)
    with pytest.raises(AdmissionRefusedError, match="hung"):
        hung.acquire(1.0)
    hung.acquire(1.0, probe=True)  # a probe still goes through


def test_stage_budget_keeps_a_reserve_for_the_fallback() -> None:
    assert stage_budget(5.0) == 5.0  # no deadline: the cap
    with call_deadline(1.0):
        budget = stage_budget(5.0, reserve_s=0.05, reserve_fraction=0.35)
        assert budget is not None and 0.55 < budget <= 0.65
    with call_deadline(0.04):
        assert stage_budget(5.0, reserve_s=0.05) is None


def test_answer_deadline_ends_a_margin_before_the_callers() -> None:
    assert answer_deadline(None) is None  # no deadline: none of our own either
    # 5 ms for the reply plus a tenth of the time left, so 25 ms of a 0.2 s deadline and 105 ms of 1 s.
    assert answer_deadline(0.2, now=100.0) == pytest.approx(100.175)
    assert answer_deadline(1.0, now=100.0) == pytest.approx(100.895)
    assert answer_deadline(0.2, margin_s=0.0, margin_fraction=0.0, now=100.0) == pytest.approx(100.2)
    # Less time left than the margin: the instant has passed already (the call is not worth starting).
    assert answer_deadline(0.004, now=100.0) < 100.0  # type: ignore[operator]
    assert answer_deadline(-0.5, now=100.0) < 100.0  # type: ignore[operator]
    with pytest.raises(ValueError, match="margin"):
        answer_deadline(0.2, margin_fraction=1.0)
    with pytest.raises(ValueError, match="margin"):
        answer_deadline(0.2, margin_s=-0.001)


def test_stage_budgets_under_an_answer_deadline_end_before_it() -> None:
    # The front hands its own deadline (not the caller's) to the pipeline: a worker stage's budget plus its
    # fallback reserve then ends the margin before the caller's deadline.
    deadline = answer_deadline(0.2)
    assert deadline is not None
    with call_deadline(deadline - time.monotonic()):
        budget = stage_budget(5.0, reserve_s=0.05, reserve_fraction=0.5)
    assert budget is not None and 0.08 < budget <= 0.0875
