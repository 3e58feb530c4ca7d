"""The ONNX MiniLM backend's separate query session: opened only once passages are embedded, off the
caller's thread, and giving bit-identical query vectors; with a reverse proof for the identity check."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from ragspine.models.dense import OnnxEmbeddingBackend

pytestmark = pytest.mark.slow

QUERIES = ["protein folding in cells", "What causes cancer metastasis?", "vitamin D and bone density"]


def _wait_for_query_session(backend: OnnxEmbeddingBackend, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while backend._query_session is None:
        assert time.monotonic() < deadline, "the query session never opened"
        time.sleep(0.02)


def check_query_vectors_match(backend: OnnxEmbeddingBackend) -> None:
    """Queries through the query session equal the same texts through the main session, bit for bit."""
    assert backend._query_session is not None
    main = backend._embed(list(QUERIES), session=backend._onnx.session)
    for query, expected in zip(QUERIES, main, strict=True):
        got = backend.embed_queries([query])[0]
        assert np.array_equal(np.asarray(got), np.asarray(expected)), f"query vector of {query!r} differs"


@pytest.fixture()
def backend() -> OnnxEmbeddingBackend:
    return OnnxEmbeddingBackend(threads=2)


def test_query_session_opens_only_after_passages_and_matches(backend: OnnxEmbeddingBackend) -> None:
    before = backend.embed_queries(list(QUERIES))
    time.sleep(0.2)
    assert backend._query_session is None, "queries alone opened a second session"
    backend.embed_texts(["A passage about protein folding in the cell."])
    _wait_for_query_session(backend)
    assert backend._query_session is not backend._onnx.session
    check_query_vectors_match(backend)
    assert backend.embed_queries(list(QUERIES)) == before


def test_query_session_can_be_turned_off() -> None:
    backend = OnnxEmbeddingBackend(threads=2, query_session=False)
    backend.embed_texts(["A passage."])
    time.sleep(0.2)
    assert backend._query_session is None


class _Skewed:
    """Broken: a query session whose outputs are nudged (a different model or kernel would do this)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def run(self, names: Any, feeds: dict[str, Any]) -> list[Any]:
        return [self.inner.run(names, feeds)[0] * 1.001 + 1e-4]


def test_reverse_proof_identity_check_catches_a_skewed_session(backend: OnnxEmbeddingBackend) -> None:
    backend.embed_texts(["A passage."])
    _wait_for_query_session(backend)
    backend._query_session = _Skewed(backend._query_session)
    with pytest.raises(AssertionError, match="differs"):
        check_query_vectors_match(backend)


_EXIT_RIGHT_AFTER_EMBEDDING = """
import threading
if {daemon}:  # the broken variant: the session is opened on a daemon thread the interpreter does not wait for
    _Thread = threading.Thread
    class _DaemonThread(_Thread):
        def __init__(self, *args, **kwargs):
            kwargs["daemon"] = True
            super().__init__(*args, **kwargs)
    threading.Thread = _DaemonThread
from ragspine.models.dense import OnnxEmbeddingBackend
OnnxEmbeddingBackend(threads=1).embed_texts(["a passage"])
"""


def _exit_codes(daemon: bool, runs: int) -> list[int]:
    import subprocess
    import sys

    script = _EXIT_RIGHT_AFTER_EMBEDDING.format(daemon=daemon)
    return [
        subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120).returncode
        for _ in range(runs)
    ]


def test_a_process_that_exits_while_the_query_session_opens_exits_cleanly() -> None:
    """The first passage batch starts opening the query session; a process that ends right then (a CLI
    command, a test) must wait for it rather than abort in onnxruntime's teardown."""
    assert _exit_codes(daemon=False, runs=3) == [0, 0, 0]


def test_reverse_proof_a_daemon_opener_aborts_the_exiting_process() -> None:
    codes = _exit_codes(daemon=True, runs=5)
    assert any(code != 0 for code in codes), f"every run exited cleanly: {codes}"
