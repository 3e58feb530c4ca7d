"""Laptop mode (models in the front process) over real loopback gRPC: a hybrid query whose in-process
query embedding is slower than the caller's deadline answers on time from the lexical channel, flagged
degraded; abandoned model calls are bounded by the gate's slots. The on-time check runs against the
unbounded implementation (the model called on the serving thread) too, which it must catch."""

from __future__ import annotations

import threading
import time
from typing import Any

import grpc
import pytest

from ragspine.retrieval.indexing.ledger import model_id
from ragspine_services._gen import retrieval_pb2 as pb
from ragspine_services.common.deadline import call_deadline
from ragspine_services.common.errors import BackendUnavailableError
from ragspine_services.front.local_models import BoundedEmbedding, ModelCallGate
from tests.service.helpers import sample_documents, wait_for

QUERY = "battery swap"
HYBRID = pb.RETRIEVAL_MODE_HYBRID


class SlowQueries:
    """The real in-process embedder, with each query embedding taking ``delay_s`` longer."""

    def __init__(self, inner: Any, delay_s: float) -> None:
        self.inner = inner
        self.delay_s = delay_s
        self.finished = 0

    @property
    def model_id(self) -> str:
        return model_id(self.inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        time.sleep(self.delay_s)
        out = (getattr(self.inner, "embed_queries", None) or self.inner.embed_texts)(texts)
        self.finished += 1
        return list(out)


class Unbounded(ModelCallGate):
    """The implementation before the gate: every model call runs on the serving thread, unbounded."""

    def call(self, stage: str, fn: Any, *args: Any) -> Any:
        return fn(*args)


def _front_with_slow_queries(make_front: Any, delay_s: float, **settings: Any) -> tuple[Any, SlowQueries]:
    front = make_front(mode="hybrid", **settings)
    backend = front.parts.catalog.embedding_backend
    assert isinstance(backend, BoundedEmbedding), "laptop mode must bound its embedding calls"
    front.stub.Ingest(pb.IngestRequest(library="lib", documents=sample_documents()), timeout=30)
    libraries = lambda: front.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=5).libraries  # noqa: E731
    wait_for(lambda: sum(lib.pending_vectors for lib in libraries()) == 0, timeout=30)
    slow = SlowQueries(backend.inner, delay_s)
    backend.inner = slow
    return front, slow


def check_on_time(front: Any, deadline_s: float) -> pb.RetrieveResponse:
    """A hybrid query answers OK before its deadline, from the lexical channel, flagged degraded."""
    started = time.monotonic()
    response = front.stub.Retrieve(pb.RetrieveRequest(query=QUERY, mode=HYBRID, top_k=3), timeout=deadline_s)
    elapsed = time.monotonic() - started
    assert elapsed < deadline_s, f"answered after {elapsed:.2f} s at a {deadline_s} s deadline"
    assert response.snippets, "no lexical answer"
    assert "embedding" in response.degraded, f"not flagged degraded: {list(response.degraded)}"
    return response


def test_slow_query_embedding_answers_lexically_within_the_deadline(make_front) -> None:
    front, slow = _front_with_slow_queries(make_front, delay_s=1.5)
    started = time.monotonic()
    check_on_time(front, deadline_s=0.6)
    # The reserve (half of what is left) is kept for the lexical answer: it comes well before 0.6 s.
    assert time.monotonic() - started < 0.55
    gate = front.parts.model_gate
    assert gate is not None and gate.abandoned == 1
    # With time to spare the same server answers hybrid, not degraded (the abandoned call finished).
    slow.delay_s = 0.0
    wait_for(lambda: gate.abandoned_running == 0, timeout=5)
    response = front.stub.Retrieve(pb.RetrieveRequest(query=QUERY, mode=HYBRID, top_k=3), timeout=5)
    assert response.snippets and not response.degraded


def test_reverse_proof_unbounded_embedding_runs_past_the_deadline(make_front) -> None:
    front, _ = _front_with_slow_queries(make_front, delay_s=1.5)
    front.parts.catalog.embedding_backend.gate = Unbounded()
    with pytest.raises((AssertionError, grpc.RpcError)) as caught:
        check_on_time(front, deadline_s=0.6)
    if isinstance(caught.value, grpc.RpcError):
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_abandoned_calls_do_not_pile_up(make_front) -> None:
    """One slot: the abandoned call holds it until it finishes, so the next queries are shed within
    their budget (never a second model call running), and every one answers on time."""
    front, slow = _front_with_slow_queries(make_front, delay_s=2.0, model_call_slots=1)
    gate = front.parts.model_gate
    for _ in range(3):
        check_on_time(front, deadline_s=0.4)
        assert gate.abandoned_running <= 1
    assert gate.abandoned == 1 and gate.shed == 2
    wait_for(lambda: slow.finished == 1 and gate.abandoned_running == 0, timeout=5)
    assert slow.finished == 1, "a shed call reached the model"


def test_gate_without_a_deadline_runs_on_the_calling_thread() -> None:
    """The drainer and in-process callers (no deadline in scope) call the model as before."""
    gate = ModelCallGate(slots=1)
    try:
        threads: list[threading.Thread] = []
        assert gate.call("embedding", lambda: threads.append(threading.current_thread()) or 7) == 7
        assert threads == [threading.current_thread()]
        with call_deadline(0.001), pytest.raises(BackendUnavailableError, match="no time left"):
            gate.call("embedding", lambda: 1)
        with call_deadline(5.0):
            assert gate.call("embedding", lambda x: x + 1, 1) == 2
        with pytest.raises(ValueError, match="slots"):
            ModelCallGate(slots=0)
    finally:
        gate.close()


def test_zero_slots_call_the_models_unbounded_and_negative_is_refused(make_front) -> None:
    front = make_front(mode="hybrid", model_call_slots=0)
    assert front.parts.model_gate is None
    assert not isinstance(front.parts.catalog.embedding_backend, BoundedEmbedding)
    with pytest.raises(ValueError, match="RAGSPINE_MODEL_CALL_SLOTS"):
        make_front(mode="hybrid", model_call_slots=-1)


def test_a_stage_fast_of_late_runs_on_the_callers_thread_and_a_slow_one_goes_back_to_the_slots() -> None:
    """After ``warm_calls`` quick calls the call skips the slot threads; one slow call sends the stage
    back through the slots, where a call past the budget is abandoned (on time)."""
    gate = ModelCallGate(slots=1, warm_calls=3, direct_margin=4.0, reserve_s=0.05, reserve_fraction=0.5)
    where: list[threading.Thread] = []

    def quick() -> int:
        where.append(threading.current_thread())
        return 1

    try:
        with call_deadline(1.0):
            for _ in range(3):  # not yet timed enough: through the slots
                assert gate.call("embedding", quick) == 1
            assert all(t is not threading.current_thread() for t in where)
            assert gate.direct == 0
            where.clear()
            assert gate.call("embedding", quick) == 1
            assert where == [threading.current_thread()] and gate.direct == 1
        # A call slower than a quarter of the budget lifts the estimate at once ...
        with call_deadline(1.0):
            gate.call("embedding", lambda: time.sleep(0.3) or 1)
        # ... so the next call goes through a slot and is abandoned when it runs past its budget.
        with call_deadline(0.4):
            started = time.monotonic()
            with pytest.raises(BackendUnavailableError, match="did not finish"):
                gate.call("embedding", lambda: time.sleep(1.0) or 1)
            assert time.monotonic() - started < 0.4
        assert gate.abandoned == 1
    finally:
        gate.close()


def test_reverse_proof_a_gate_that_never_leaves_the_fast_path_runs_late() -> None:
    """A gate whose estimate never rises (it trusts its first quick calls forever) must run the slow
    call on the caller's thread past the deadline: the check above would catch it."""

    class Trusting(ModelCallGate):
        def _record(self, stage: str, seconds: float) -> None:
            with self._lock:
                self._estimate.setdefault(stage, seconds)
                self._timed[stage] = self._timed.get(stage, 0) + 1

    gate = Trusting(slots=1, warm_calls=1)
    try:
        with call_deadline(1.0):
            gate.call("embedding", lambda: 1)
            gate.call("embedding", lambda: time.sleep(0.3) or 1)
        with call_deadline(0.4):
            started = time.monotonic()
            gate.call("embedding", lambda: time.sleep(1.0) or 1)  # no abandonment: runs to the end
            assert time.monotonic() - started >= 0.4
    finally:
        gate.close()
