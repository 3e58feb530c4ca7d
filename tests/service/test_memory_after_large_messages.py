"""Memory taken by large messages is given back: the front's RSS returns near where it started.

A ``ragspine serve all`` process with tokens receives 16 callers without a token, each sending three
30 MB Ingest messages (all refused UNAUTHENTICATED, before any is parsed); an open one receives the same
from 16 callers of one address (at most ``RAGSPINE_LARGE_CALLS_PER_CALLER`` run at once, the others are
RESOURCE_EXHAUSTED, and those that run are over the text limit). A few seconds after each flood the
resident memory is back within 100 MB of what it was before (``bench/soak.py --phases large`` measures
60 s after). Reverse proof: with the allocator left as glibc sets it up and no trimming
(``RAGSPINE_MALLOC_ARENA_MAX=0``, ``RAGSPINE_HEAP_TRIM_BYTES=0``), hundreds of MB stay.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.service.bench_helpers import soak_limits

MB = 1024 * 1024


@pytest.mark.slow
def test_memory_returns_after_large_unauthenticated_messages(tmp_path: Path) -> None:
    limits = soak_limits()
    with limits.serve(tmp_path, {"RAGSPINE_AUTH_TOKENS_FILE": limits.tokens_file(tmp_path)}) as (
        proc,
        address,
    ):
        figures = limits.memory_after_flood(proc.pid, address, settle_s=4.0)
    assert figures["codes"] == {"UNAUTHENTICATED": 48}, figures
    assert figures["kept_mb"] < 100, figures


@pytest.mark.slow
def test_memory_returns_after_large_open_mode_messages(tmp_path: Path) -> None:
    limits = soak_limits()
    with limits.serve(tmp_path) as (proc, address):
        figures = limits.memory_after_flood(proc.pid, address, settle_s=4.0)
    assert set(figures["codes"]) == {"RESOURCE_EXHAUSTED"} and sum(figures["codes"].values()) == 48, figures
    assert figures["kept_mb"] < 100, figures


@pytest.mark.slow
def test_reverse_proof_without_tuning_and_trimming_memory_stays(tmp_path: Path) -> None:
    limits = soak_limits()
    env = {
        "RAGSPINE_AUTH_TOKENS_FILE": limits.tokens_file(tmp_path),
        "RAGSPINE_MALLOC_ARENA_MAX": "0",
        "RAGSPINE_HEAP_TRIM_BYTES": "0",
    }
    with limits.serve(tmp_path, env) as (proc, address):
        figures = limits.memory_after_flood(proc.pid, address, settle_s=4.0)
    assert figures["kept_mb"] > 100, figures
