"""Dynamic batching: concurrent requests share one model call within the token budget."""

from __future__ import annotations

import threading

import pytest

from ragspine_services.common.errors import OverloadedError, RequestTooLargeError
from ragspine_services.worker.batcher import DynamicBatcher
from tests.service.helpers import wait_for


def test_waiting_requests_with_the_same_key_are_merged_into_one_call() -> None:
    calls: list[list[str]] = []
    gate = threading.Event()
    entered = threading.Event()

    def run(items: list[str]) -> list[str]:
        calls.append(list(items))
        entered.set()
        gate.wait(5)
        return [item.upper() for item in items]

    batcher = DynamicBatcher(name="t-merge", max_batch_tokens=100, max_queue=10, max_concurrent=1)
    results: dict[str, list[str]] = {}

    def submit(key: str, items: list[str]) -> None:
        results[items[0]] = batcher.submit(key, items, run).results

    first = threading.Thread(target=submit, args=("k", ["a"]))
    first.start()
    assert entered.wait(5)
    later = [
        threading.Thread(target=submit, args=(key, [name]))
        for key, name in (("k", "b"), ("k", "c"), ("x", "d"))
    ]
    for thread in later:
        thread.start()
    wait_for(lambda: batcher.depth == 3)
    gate.set()
    for thread in [first, *later]:
        thread.join(5)
    batcher.close()
    assert results == {"a": ["A"], "b": ["B"], "c": ["C"], "d": ["D"]}
    assert calls == [["a"], ["b", "c"], ["d"]]


def test_limits_raise_the_documented_errors() -> None:
    batcher = DynamicBatcher(name="t-limits", max_batch_tokens=3, max_queue=0)
    with pytest.raises(RequestTooLargeError, match="limit per batch is 3"):
        batcher.submit("k", ["one two three four"], lambda items: items)
    with pytest.raises(OverloadedError, match="queue is full"):
        batcher.submit("k", ["one"], lambda items: items)
    batcher.close()


def test_model_errors_reach_every_caller_of_the_batch() -> None:
    batcher = DynamicBatcher(name="t-errors", max_queue=4)

    def broken(items: list[str]) -> list[str]:
        raise RuntimeError("model crashed")

    with pytest.raises(RuntimeError, match="model crashed"):
        batcher.submit("k", ["a"], broken)
    with pytest.raises(RuntimeError, match="2 results for 1 inputs"):
        batcher.submit("k", ["a"], lambda items: ["x", "y"])
    batcher.close()
