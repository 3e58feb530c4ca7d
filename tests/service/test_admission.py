"""Admission control on a real server: bounded running and waiting calls, fast refusals, health always
answered, first come first served, and at most N large requests per caller without a token.

A tiny service registered on ``start_server`` blocks until the test lets it go, so the slots are held for
as long as a check needs. Reverse proofs: a plain semaphore lets newcomers barge ahead of waiting calls,
which the fairness check catches; without the per-caller limit every large call runs at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ragspine_services.common.admission import FairSlots, Lane
from ragspine_services.common.auth import ANONYMOUS, Caller, OpenAuthenticator
from ragspine_services.common.errors import OverloadedError
from ragspine_services.common.interceptor import LargeCallLimiter
from ragspine_services.common.server import RunningServer, start_server

METHOD = "/test.Slow/Wait"


class Slow:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.running = 0
        self.peak = 0
        self.lock = threading.Lock()

    def wait(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            self.release.wait(10)
            return request
        finally:
            with self.lock:
                self.running -= 1


def _handlers(slow: Slow) -> Any:
    identity = lambda b: b  # noqa: E731 - bytes in, bytes out
    return grpc.method_handlers_generic_handler(
        "test.Slow",
        {"Wait": grpc.unary_unary_rpc_method_handler(slow.wait, identity, identity)},
    )


@pytest.fixture()
def served() -> Iterator[tuple[RunningServer, Slow]]:
    slow = Slow()
    running = start_server(
        add_servicers=lambda s: s.add_generic_rpc_handlers((_handlers(slow),)),
        service_names=["test.Slow"],
        authenticator=OpenAuthenticator(),
        max_workers=2,
        max_queued=2,
        queue_wait_s=5.0,
    )
    running.set_serving(True)
    try:
        yield running, slow
    finally:
        slow.release.set()
        running.stop(0)


def _call(address: str, out: list[str], payload: bytes = b"x", timeout: float = 20) -> None:
    with grpc.insecure_channel(address) as channel:
        try:
            channel.unary_unary(METHOD)(payload, timeout=timeout)
            out.append("OK")
        except grpc.RpcError as exc:
            out.append(exc.code().name)


def test_beyond_running_and_queued_calls_are_refused_at_once_and_health_answers(
    served: tuple[RunningServer, Slow],
) -> None:
    running, slow = served
    address = f"127.0.0.1:{running.port}"
    codes: list[str] = []
    held = [threading.Thread(target=_call, args=(address, codes)) for _ in range(4)]
    for t in held:
        t.start()
    deadline = time.monotonic() + 5
    while slow.running < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the other two are waiting for a slot
    started = time.perf_counter()
    extra: list[str] = []
    _call(address, extra)
    assert extra == ["RESOURCE_EXHAUSTED"] and time.perf_counter() - started < 1.0
    with grpc.insecure_channel(address) as channel:
        started = time.perf_counter()
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2).status
    assert status == health_pb2.HealthCheckResponse.SERVING and time.perf_counter() - started < 0.5
    slow.release.set()
    for t in held:
        t.join()
    assert codes == ["OK"] * 4 and slow.peak == 2


def test_a_waiting_call_gives_up_at_the_queue_wait() -> None:
    slow = Slow()
    running = start_server(
        add_servicers=lambda s: s.add_generic_rpc_handlers((_handlers(slow),)),
        service_names=["test.Slow"],
        authenticator=OpenAuthenticator(),
        max_workers=1,
        max_queued=1,
        queue_wait_s=0.3,
    )
    try:
        address = f"127.0.0.1:{running.port}"
        first: list[str] = []
        holder = threading.Thread(target=_call, args=(address, first))
        holder.start()
        while slow.running < 1:
            time.sleep(0.01)
        waited: list[str] = []
        started = time.perf_counter()
        _call(address, waited)
        assert waited == ["RESOURCE_EXHAUSTED"] and 0.25 < time.perf_counter() - started < 2.0
    finally:
        slow.release.set()
        holder.join()
        running.stop(0)


def _order(slots: Any, take: Any) -> list[int]:
    """Release one permit while two callers wait and a newcomer arrives: who gets it first?"""
    got: list[int] = []
    assert take(slots, 0)
    waiters = [threading.Thread(target=lambda i=i: take(slots, 5) and got.append(i)) for i in (1, 2)]
    for i, t in enumerate(waiters):
        t.start()
        time.sleep(0.1 * (i + 1))
    slots.release()  # the longest waiter (1) must get it, not a newcomer
    newcomer = take(slots, 0)
    if newcomer:
        got.append(3)
    time.sleep(0.2)
    slots.release()
    time.sleep(0.2)
    slots.release()
    for t in waiters:
        t.join(2)
    return got


def test_fair_slots_serve_the_longest_waiter_first() -> None:
    assert _order(FairSlots(1), lambda s, wait: s.acquire(wait)) == [1, 2]


def test_reverse_proof_a_plain_semaphore_lets_a_newcomer_barge() -> None:
    def take(s: threading.Semaphore, wait: float) -> bool:
        return s.acquire(timeout=wait) if wait else s.acquire(blocking=False)

    order = _order(threading.Semaphore(1), take)
    assert order[0] != 1 or 3 in order  # someone other than the longest waiter went first


def test_a_lane_refuses_after_its_wait() -> None:
    lane = Lane("heavy retrieve", 1, queue_wait_s=0.1)
    with lane.slot():
        started = time.perf_counter()
        with pytest.raises(OverloadedError, match="heavy retrieve"), lane.slot():
            pass
        assert time.perf_counter() - started < 1.0
    with lane.slot(time_remaining=5):
        pass


def test_large_calls_per_anonymous_caller() -> None:
    limiter = LargeCallLimiter(2)
    assert limiter.address("ipv4:127.0.0.1:5555") == "ipv4:127.0.0.1"
    assert limiter.address("ipv6:[::1]:5555") == "ipv6:[::1]"
    limiter.enter("a")
    limiter.enter("a")
    with pytest.raises(OverloadedError, match="RAGSPINE_LARGE_CALLS_PER_CALLER"):
        limiter.enter("a")
    limiter.enter("b")  # another address has its own
    limiter.leave("a")
    limiter.enter("a")


def _large_codes(per_caller: int, caller: Caller) -> dict[str, int]:
    """4 large calls at once over a real server, as ``caller``; the status counts."""
    slow = Slow()

    class Fixed(OpenAuthenticator):
        def authenticate(self, metadata: Any) -> Caller:
            return caller

    running = start_server(
        add_servicers=lambda s: s.add_generic_rpc_handlers((_handlers(slow),)),
        service_names=["test.Slow"],
        authenticator=Fixed(),
        max_workers=8,
        large_calls_per_caller=per_caller,
    )
    big = b"x" * (2 * 1024 * 1024)
    try:
        address = f"127.0.0.1:{running.port}"
        codes: list[str] = []
        threads = [threading.Thread(target=_call, args=(address, codes, big)) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        slow.release.set()
        for t in threads:
            t.join()
        return {c: codes.count(c) for c in set(codes)}
    finally:
        slow.release.set()
        running.stop(0)


def test_the_interceptor_limits_only_anonymous_large_calls() -> None:
    assert _large_codes(2, ANONYMOUS) == {"OK": 2, "RESOURCE_EXHAUSTED": 2}
    assert _large_codes(2, Caller("known")) == {"OK": 4}  # a caller with a token is not limited here


def test_reverse_proof_without_the_limit_every_large_call_runs() -> None:
    assert _large_codes(100, ANONYMOUS) == {"OK": 4}
