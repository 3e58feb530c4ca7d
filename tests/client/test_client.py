"""The typed client against real fronts on loopback: round trips, typed errors, retries across a server
restart, no server at all, deadlines, tokens, TLS, and the asyncio variant."""

from __future__ import annotations

import asyncio
import inspect
import json
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pytest

from ragspine.settings import Settings
from ragspine_client import (
    AsyncRetrievalClient,
    Document,
    Filter,
    InvalidArgument,
    MetaDate,
    NotFound,
    PermissionDenied,
    QueryStages,
    RetrievalClient,
    RetryPolicy,
    ServerUnavailable,
    Unauthenticated,
    _core,
)
from ragspine_client._gen import retrieval_pb2
from ragspine_client.errors import DeadlineExceeded
from ragspine_services.front.server import build_front_parts, start_front
from tests.service.helpers import free_port

DOCS = [
    Document(
        "arm",
        text="The harvest arm runs nine hours on one battery. Swapping the battery takes two minutes.",
        title="Harvest arm",
        language="en",
        metadata={"dept": "ops", "tags": ["field", "battery"], "pages": 4, "signed": date(2024, 6, 30)},
    ),
    Document("memo", text="The board met on Tuesday about quarterly planning.", title="Memo"),
]


@dataclass(frozen=True)
class CountingRetry(RetryPolicy):
    """Records every backoff the client takes, so a test can tell a retried call from a first-try one."""

    waits: list[float] | None = None

    def delay(self, retry: int) -> float:
        wait = super().delay(retry)
        assert self.waits is not None
        self.waits.append(wait)
        return wait


def test_round_trip_with_typed_results(make_front) -> None:
    front = make_front()
    with RetrievalClient(front.address, timeout_s=10) as client:
        ingested = client.ingest("lib", DOCS)
        assert [(r.doc_id, r.chunks_written > 0, r.replaced) for r in ingested.results] == [
            ("arm", True, False),
            ("memo", True, False),
        ]
        answer = client.retrieve("how long does the battery last", libraries=["lib"], top_k=3)
        top = answer.snippets[0]
        assert (top.doc_id, top.title, top.library_id, top.language) == ("arm", "Harvest arm", "lib", "en")
        assert top.scores.bm25 is not None and top.scores.bm25 > 0 and top.scores.rerank is None
        assert top.metadata == {
            "dept": "ops",
            "pages": 4.0,
            "signed": MetaDate("2024-06-30"),
            "tags": ["field", "battery"],
        }
        assert answer.degraded == [] and answer.total_ms > 0
        wire = answer.to_dict()
        assert wire["snippets"][0]["doc_id"] == "arm" and "docId" not in json.dumps(wire)
        filtered = client.retrieve(
            "battery", filters=[Filter("dept", "is", "ops"), ("tags", "contains", "field")]
        )
        assert {s.doc_id for s in filtered.snippets} == {"arm"}
        # A list of numbers is a number list on the wire: it matches the number field "pages" (4.0).
        assert {
            s.doc_id for s in client.retrieve("battery", filters=[Filter("pages", "in", [4, 9])]).snippets
        } == {"arm"}
        assert not client.retrieve("battery", filters=[Filter("pages", "in", ["4"])]).snippets
        assert {
            s.doc_id for s in client.retrieve("battery", filters=[("pages", "between", [3, 5.5])]).snippets
        } == {"arm"}
        with pytest.raises(ValueError, match="not both"):
            Filter("pages", "in", [4, "9"]).to_proto()
        missing = client.retrieve("battery board", filters=[Filter("language", "ne", "zh")])
        assert {s.doc_id for s in missing.snippets} == {"arm"}
        assert [(r.field, r.documents_missing) for r in missing.filter_fields] == [("language", 1)]
        replaced = client.ingest("lib", [Document("memo", text="The board met on Friday.", title="Memo")])
        assert replaced.results[0].replaced is True
        unchanged = client.ingest("lib", [Document("memo", text="The board met on Friday.", title="Memo")])
        assert (unchanged.results[0].chunks_written, unchanged.results[0].replaced) == (0, False)
        assert (replaced.results[0].status, unchanged.results[0].status) == ("replaced", "unchanged")
        mixed = client.ingest("lib", [Document("new", text="Fresh minutes."), Document("void", text=" ")])
        assert [(r.doc_id, r.status, r.failed, r.index) for r in mixed.results] == [
            ("new", "stored", False, 0),
            ("void", "failed", True, 1),
        ]
        assert "blank" in mixed.results[1].error and mixed.results[0].error == ""
        client.delete_document("lib", "new")
        assert [lib.library_id for lib in client.list_libraries()] == ["lib"]
        assert client.info().max_top_k > 0
        assert client.delete_document("lib", "memo") > 0
        with pytest.raises(NotFound, match="memo"):
            client.delete_document("lib", "memo")
        with pytest.raises(InvalidArgument, match="unknown filter op"):
            client.retrieve("battery", filters=[Filter("dept", "resembles", "x")])
        with pytest.raises(InvalidArgument, match="blank"):
            client.retrieve("   ")


def test_stream_ingest(make_front) -> None:
    front = make_front()
    with RetrievalClient(front.address, timeout_s=10) as client:
        result = client.ingest_stream("lib", iter(DOCS))
        assert [r.doc_id for r in result.results] == ["arm", "memo"]


def test_no_server_is_a_clear_unavailable_error_within_the_deadline() -> None:
    address = f"127.0.0.1:{free_port()}"
    waits: list[float] = []
    retry = CountingRetry(max_attempts=3, initial_backoff_s=0.05, waits=waits)
    started = time.monotonic()
    with (
        RetrievalClient(address, timeout_s=5, retry=retry) as client,
        pytest.raises(ServerUnavailable) as info,
    ):
        client.retrieve("anything")
    assert time.monotonic() - started < 5
    assert len(waits) == 2  # three attempts, two backoffs
    message = str(info.value)
    assert message.startswith(f"cannot reach a RAGSpine server at {address} after 3 attempts")
    assert "check that it is running" in message and "\n" not in message


def test_retry_survives_a_server_restart(tmp_path: Path) -> None:
    settings = Settings(data_dir=str(tmp_path / "data"), retrieval_mode="economy", reranker="none")
    port = free_port()
    parts = build_front_parts(settings)
    running = start_front(settings, parts, port=port)
    waits: list[float] = []
    retry = CountingRetry(max_attempts=40, initial_backoff_s=0.05, max_backoff_s=0.2, waits=waits)
    client = RetrievalClient(f"127.0.0.1:{port}", timeout_s=30, retry=retry)
    restarted: list[object] = []
    try:
        client.ingest("lib", DOCS)
        before = client.retrieve("battery swap", libraries=["lib"])
        running.stop(0)
        parts.close()

        def restart() -> None:
            time.sleep(0.8)
            new_parts = build_front_parts(settings)
            restarted.extend([new_parts, start_front(settings, new_parts, port=port)])

        thread = threading.Thread(target=restart)
        thread.start()
        after = client.retrieve("battery swap", libraries=["lib"])  # issued while the server is down
        thread.join()
        assert waits, "the call should have needed at least one retry"
        assert [s.chunk_id for s in after.snippets] == [s.chunk_id for s in before.snippets]
        # Without retries the same situation is an immediate, clear error.
        restarted[1].stop(0)  # type: ignore[attr-defined]
        with (
            RetrievalClient(f"127.0.0.1:{port}", retry=RetryPolicy(max_attempts=1)) as once,
            pytest.raises(ServerUnavailable),
        ):
            once.retrieve("battery swap")
    finally:
        client.close()
        thread_parts = restarted[0] if restarted else None
        if thread_parts is not None:
            thread_parts.close()  # type: ignore[attr-defined]


def test_deadline_is_enforced() -> None:
    address = f"127.0.0.1:{free_port()}"
    retry = RetryPolicy(max_attempts=1000, initial_backoff_s=0.05, max_backoff_s=0.05)
    started = time.monotonic()
    with (
        RetrievalClient(address, timeout_s=0.5, retry=retry) as client,
        pytest.raises((DeadlineExceeded, ServerUnavailable)),
    ):
        client.retrieve("anything")
    assert time.monotonic() - started < 2.0


def test_tokens_are_sent_and_refusals_are_typed(make_front, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(
        json.dumps({"admin": {"caller": "a", "libraries": ["*"]}, "hr": {"caller": "h", "libraries": ["hr"]}})
    )
    front = make_front(tokens_file=str(tokens))
    with RetrievalClient(front.address, token="admin", timeout_s=10) as admin:
        admin.ingest("ops", DOCS[:1])
    with RetrievalClient(front.address, token="hr", timeout_s=10) as hr, pytest.raises(PermissionDenied):
        hr.retrieve("battery", libraries=["ops"])
    with RetrievalClient(front.address, token="nope", timeout_s=10) as bad, pytest.raises(Unauthenticated):
        bad.retrieve("battery")


def test_tls(tmp_path: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed, so no test certificate can be made")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    settings = Settings(
        data_dir=str(tmp_path / "data"),
        retrieval_mode="economy",
        reranker="none",
        tls_cert_file=str(cert),
        tls_key_file=str(key),
    )
    parts = build_front_parts(settings)
    running = start_front(settings, parts, host="localhost", port=free_port())
    try:
        address = f"localhost:{running.port}"
        with RetrievalClient(address, tls_ca_file=cert, timeout_s=10) as client:
            client.ingest("lib", DOCS[:1])
            assert client.retrieve("battery").snippets[0].doc_id == "arm"
        with (
            RetrievalClient(address, timeout_s=2, retry=RetryPolicy(max_attempts=1)) as plain,
            pytest.raises(ServerUnavailable),
        ):
            plain.retrieve("battery")
    finally:
        running.stop(0)
        parts.close()


def test_async_client(make_front) -> None:
    front = make_front()

    async def run() -> None:
        async with AsyncRetrievalClient(front.address, timeout_s=10) as client:
            await client.ingest("lib", DOCS)
            answers = await asyncio.gather(*(client.retrieve("battery", libraries=["lib"]) for _ in range(8)))
            assert all(a.snippets[0].doc_id == "arm" for a in answers)
            assert [lib.library_id for lib in await client.list_libraries()] == ["lib"]
            with pytest.raises(InvalidArgument):
                await client.retrieve("battery", filters=[Filter("signed", "before", "soon")])
        retry = RetryPolicy(max_attempts=2, initial_backoff_s=0.05)
        async with AsyncRetrievalClient(f"127.0.0.1:{free_port()}", timeout_s=5, retry=retry) as nobody:
            with pytest.raises(ServerUnavailable, match="after 2 attempts"):
                await nobody.info()

    asyncio.run(run())


def test_async_client_streams_and_sends_prepared_requests(make_front) -> None:
    front = make_front()

    async def run() -> tuple[list[str], str]:
        async with AsyncRetrievalClient(front.address, timeout_s=10) as client:
            streamed = await client.ingest_stream("lib", iter(DOCS))
            raw = await client.retrieve_raw(
                retrieval_pb2.RetrieveRequest(query="battery", libraries=["lib"], top_k=1)
            )
            return [r.doc_id for r in streamed.results], raw.snippets[0].doc_id

    assert asyncio.run(run()) == (["arm", "memo"], "arm")


def _calls(cls: type) -> dict[str, inspect.Signature]:
    members = {name: getattr(cls, name) for name in dir(cls) if not name.startswith("_") and name != "close"}
    return {name: inspect.signature(member) for name, member in members.items() if callable(member)}


def test_both_clients_offer_every_call_with_one_signature() -> None:
    """Both clients are made from the same plans: the same calls, arguments, defaults and result types."""
    plans = {plan.__name__ for plan in _core.PLANS}
    sync, asyncio_ = _calls(RetrievalClient), _calls(AsyncRetrievalClient)
    assert set(sync) == set(asyncio_) == plans
    assert sync == asyncio_
    assert all(inspect.iscoroutinefunction(getattr(AsyncRetrievalClient, name)) for name in plans)
    assert not any(inspect.iscoroutinefunction(getattr(RetrievalClient, name)) for name in plans)
    assert str(sync["retrieve"].return_annotation) == "RetrieveResult"
    assert RetrievalClient.retrieve.__doc__ == AsyncRetrievalClient.retrieve.__doc__
    assert RetrievalClient.retrieve.__doc__ and "Snippets answering" in RetrievalClient.retrieve.__doc__

    # Reverse proof: a client that drops a call, or changes one argument's default, is told apart.
    class Short(AsyncRetrievalClient):
        ingest_stream = None  # type: ignore[assignment]

    class Drifted(RetrievalClient):
        def info(self, *, timeout_s: float | None = 5.0) -> object:  # type: ignore[override]
            return None

    assert set(_calls(Short)) != plans
    assert _calls(Drifted)["info"] != sync["info"]


def test_query_stage_options_and_min_relevance_reach_the_server(make_front) -> None:
    front = make_front()
    with RetrievalClient(front.address, timeout_s=10) as client:
        client.ingest("lib", DOCS)
        plain = client.retrieve("battery board", libraries=["lib"], top_k=5, min_relevance=0.0)
        assert plain.stages == [] and len(plain.snippets) == 2
        staged = client.retrieve(
            "battery board",
            libraries=["lib"],
            top_k=5,
            min_relevance=0.0,
            stages=QueryStages(postprocessor="mmr,lost_in_middle"),
        )
        [report] = staged.stages
        assert (report.stage, report.steps, report.degraded) == (
            "postprocess",
            ["mmr", "lost_in_middle"],
            False,
        )
        assert {s.doc_id for s in staged.snippets} == {s.doc_id for s in plain.snippets}
        assert staged.to_dict()["stages"][0]["stage"] == "postprocess"
        # Every relevance is at or below 1: asking for exactly 1.0 keeps none of them, and says so.
        strict = client.retrieve("battery board", libraries=["lib"], top_k=5, min_relevance=1.0)
        assert strict.snippets == [] and strict.below_min_relevance == len(plain.snippets)
        with pytest.raises(InvalidArgument, match="postprocessor"):
            client.retrieve("battery", stages=QueryStages(postprocessor="telepathy"))
        with pytest.raises(ValueError, match="min_relevance"):
            client.retrieve("battery", min_relevance=1.5)
        with pytest.raises(ValueError, match=r"QueryStages\.judge"):
            QueryStages(judge=1)  # type: ignore[arg-type]


def test_async_client_sends_query_stages(make_front) -> None:
    front = make_front()

    async def run() -> list[str]:
        async with AsyncRetrievalClient(front.address, timeout_s=10) as client:
            await client.ingest("lib", DOCS)
            answer = await client.retrieve(
                "battery", libraries=["lib"], stages=QueryStages(postprocessor="mmr"), min_relevance=0.0
            )
            return [r.stage for r in answer.stages]

    assert asyncio.run(run()) == ["postprocess"]


def test_structured_calls(make_front) -> None:
    from ragspine_client._gen import structured_pb2 as spb
    from tests.structured.test_structured_grpc import FACTS_CSV

    front = make_front()
    with RetrievalClient(front.address, timeout_s=10) as client:
        stored = client.ingest_facts("fin", "q3.csv", FACTS_CSV)
        assert (stored.source_doc_id, stored.rows_read, stored.facts_written, stored.errors) == (
            "q3.csv",
            4,
            4,
            [],
        )
        found = client.query_metric("fin", "revenue", "hk", "2025Q3")
        assert (found.state, found.value, found.locator) == ("found", 120.5, "q3.csv!A2")
        assert "120.5" in found.answer
        missing = client.query_metric("fin", "营收", "香港", "2024Q3")
        assert missing.state == "not_found" and missing.value is None and missing.message
        unknown = client.query_metric("fin", "ebitda", "hk", "2025Q3")
        assert (unknown.state, unknown.param, unknown.raw_value) == ("unrecognized_param", "metric", "ebitda")
        rollup = client.call_structured(
            "GraphRollup",
            spb.GraphRollupRequest(library_id="fin", parent_entity="集团", metric="营收", period="2025Q3"),
        )
        assert rollup.found and rollup.total == 200.5
        bad = client.ingest_facts("fin", "bad.csv", FACTS_CSV + "营收,火星,2025Q3,1,,\n".encode())
        assert bad.facts_written == 0 and bad.errors and bad.errors[0].locator.startswith("bad.csv!")
        with pytest.raises(InvalidArgument, match=r"x\.txt"):
            client.ingest_facts("fin", "x.txt", b"a")
        with pytest.raises(ValueError, match="rpc must be one of"):
            client.call_structured("DropTables", spb.GraphRollupRequest())
        with pytest.raises(ValueError, match="GraphTraceRequest"):
            client.call_structured("GraphTrace", spb.GraphRollupRequest())

    async def run() -> str:
        async with AsyncRetrievalClient(front.address, timeout_s=10) as client:
            return (await client.query_metric("fin", "revenue", "china", "2025Q3")).state

    assert asyncio.run(run()) == "found"
