"""Fuzz every request message of ragspine.v1 against live loopback servers (front in split mode + model
worker): random well-typed messages (strings with control, zero-width and full-width characters, unknown
enum values, extreme numbers, file bytes) and raw bytes. Goal: no INTERNAL, UNKNOWN or DEADLINE_EXCEEDED
status, both servers still healthy, and a fixed set of documents still retrievable afterwards."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from ragspine.settings import Settings
from ragspine_services._gen import model_worker_pb2, retrieval_pb2, retrieval_pb2_grpc
from ragspine_services.front.server import build_front_parts, start_front
from ragspine_services.worker.models import ModelFactories, ModelRegistry
from ragspine_services.worker.server import start_worker
from ragspine_services.worker.visual import encode_png
from tests.service.helpers import SAMPLE, CountingEmbedding, LengthReranker, free_port, health_status

EXAMPLES = 200
FORBIDDEN = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}
TOKEN = (("authorization", "Bearer svc-token"),)
FIXED_LIBRARY = "fixed-corpus-7f3a"
FIXED = {f"fixed-doc-7f3a-{i}": f"The {word} ledger entry number {i}." for i, word in enumerate(
    ["quetzalcoatlus", "brontotherium", "ankylosaurid", "pachycephalo"]
)}  # fmt: skip

# Strings the fuzzer mixes into random text: ids that are almost valid, attack labels, dates, filters.
INTERESTING = [
    "",
    " ",
    "lib",
    "lib\n",
    "../etc",
    FIXED_LIBRARY,
    "RESTRICTED",
    "RESTRICTED\u200b",
    "ＲＥＳＴＲＩＣＴＥＤ",
    "SECRET",
    "public",
    "2024-06-30",
    "not a date; DROP TABLE",
    "eq",
    "between",
    "in",
    "topic",
    "doc_id",
    "none",
    "length",
    "x.pdf",
    "a.md",
    "application/pdf",
    "text/plain",
    "\x00",
    "\ud7ff\ue000\ufffd",
    "营收 下滑",
    "a" * 5000,
]
PDF = (SAMPLE / "harvest_arm_safety_summary.pdf").read_bytes()
BLOBS = [b"", b"%PDF-1.4\n", PDF, PDF[: len(PDF) // 2], encode_png(Image.new("RGB", (8, 8)))]

_TEXT = st.one_of(st.sampled_from(INTERESTING), st.text(max_size=40), st.text(alphabet="ab \n", max_size=80))
_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FieldDescriptor.TYPE_STRING: _TEXT,
    FieldDescriptor.TYPE_BYTES: st.one_of(st.sampled_from(BLOBS), st.binary(max_size=200)),
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_INT32: st.one_of(st.integers(-3, 12), st.integers(-(2**31), 2**31 - 1)),
    FieldDescriptor.TYPE_INT64: st.one_of(st.integers(-3, 12), st.integers(-(2**63), 2**63 - 1)),
    FieldDescriptor.TYPE_UINT32: st.one_of(st.integers(0, 12), st.integers(0, 2**32 - 1)),
    FieldDescriptor.TYPE_UINT64: st.one_of(st.integers(0, 12), st.integers(0, 2**64 - 1)),
    FieldDescriptor.TYPE_DOUBLE: st.floats(allow_nan=True, allow_infinity=True),
    FieldDescriptor.TYPE_FLOAT: st.floats(allow_nan=True, allow_infinity=True, width=32),
    FieldDescriptor.TYPE_ENUM: st.integers(-2, 9),
}


def _field(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            values = (
                messages(value_field.message_type, depth + 1)
                if value_field.type == FieldDescriptor.TYPE_MESSAGE
                else _SCALARS[value_field.type]
            )
            return st.dictionaries(_TEXT, values, max_size=3)
        inner = messages(field.message_type, depth + 1)
    else:
        inner = _SCALARS[field.type]
    if field.is_repeated:
        return st.lists(inner, max_size=4)
    return inner


def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Random messages of ``descriptor``'s type; each field is set or left unset."""
    cls = GetMessageClass(descriptor)
    if depth > 3:
        return st.just(cls())
    fields = {f.name: st.none() | _field(f, depth) for f in descriptor.fields}

    def build(values: dict[str, Any]) -> Message:
        message = cls()
        for name, value in values.items():
            if value is None:
                continue
            field = descriptor.fields_by_name[name]
            target = getattr(message, name)
            if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
                if field.message_type.fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE:
                    for key, item in value.items():
                        target[key].CopyFrom(item)
                else:
                    target.update(value)
            elif field.is_repeated:
                if field.type == FieldDescriptor.TYPE_MESSAGE:
                    for item in value:
                        target.add().CopyFrom(item)
                else:
                    target.extend(value)
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                target.CopyFrom(value)
            else:
                setattr(message, name, value)
        return message

    return st.fixed_dictionaries(fields).map(build)


# Near-valid requests: the shapes a client sends, with fuzzed values in the fields that matter, so the
# fuzzer reaches parsing, chunking, storage, filtering and fusion rather than only the first check.
FUZZ_LIBRARIES = ["fz-a", "fz-b"]
_LABELS = st.sampled_from(
    ["", "PUBLIC", "internal", "RESTRICTED", "RESTRICTED\u200b", "ＲＥＳＴＲＩＣＴＥＤ"]
)
_WORDS = st.text(alphabet="abcdefgh ijk\n营收下滑.", min_size=1, max_size=200).filter(str.strip)
_FIELDS = ["topic", "entity", "geography", "period", "language", "doc_id", "title", "bogus"]
_OPS = ["eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "between", "", "eq", "in", "like"]


def _document() -> st.SearchStrategy[Message]:
    text = st.builds(lambda t: {"text": t}, _WORDS)
    file = st.builds(
        lambda data, name, pages, dpi: {"file": data, "filename": name, "pages": pages, "page_dpi": dpi},
        st.sampled_from([PDF, PDF, b"Plain text about abc.\n\nMore text.", *BLOBS]),
        st.sampled_from(["x.pdf", "a.md", "b.txt", "c.docx", "x.pdf", "b.txt"]),
        st.booleans(),
        st.sampled_from([0, 72, 5, 100]),
    )

    def build(content: dict[str, Any], doc_id: str, label: str, when: str, corrupt: str | None, junk: str):
        doc = retrieval_pb2.Document(doc_id=doc_id, sensitivity=label, valid_as_of=when, topic="t", **content)
        if corrupt is not None:  # one field at a time gets a random value
            setattr(doc, corrupt, junk)
        return doc

    return st.builds(
        build,
        st.one_of(text, text, file),
        st.sampled_from(["d1", "d2", "d3"]),
        _LABELS,
        st.sampled_from(["", "2024-06-30", "2024-06-30T01:02:03+00:00"]),
        st.sampled_from(
            [None, None, None, "doc_id", "title", "sensitivity", "valid_as_of", "topic", "filename"]
        ),
        _TEXT,
    )


def _filter() -> st.SearchStrategy[Message]:
    value = st.one_of(
        st.builds(lambda v: {"string_value": v}, _TEXT),
        st.builds(lambda v: {"number_value": v}, st.floats(allow_nan=True, allow_infinity=True)),
        st.builds(lambda v: {"list_value": retrieval_pb2.StringList(values=v)}, st.lists(_TEXT, max_size=3)),
        st.just({}),
    )
    return st.builds(
        lambda field, op, v: retrieval_pb2.FilterCondition(field=field, op=op, **v),
        st.sampled_from(_FIELDS),
        st.sampled_from(_OPS),
        value,
    )


def near_valid(request_cls: Any) -> st.SearchStrategy[Any] | None:
    """A strategy of near-valid requests of ``request_cls`` (None when random messages already are)."""
    library = st.sampled_from(FUZZ_LIBRARIES)
    if request_cls is retrieval_pb2.IngestRequest:
        return st.builds(
            lambda lib, docs: retrieval_pb2.IngestRequest(library=lib, documents=docs),
            library,
            st.lists(_document(), min_size=1, max_size=2),
        )
    if request_cls is retrieval_pb2.IngestStreamRequest:
        return st.builds(
            lambda lib, docs: [retrieval_pb2.IngestStreamRequest(library=lib, document=d) for d in docs],
            library,
            st.lists(_document(), min_size=1, max_size=3),
        )
    if request_cls is retrieval_pb2.DeleteDocumentRequest:
        return st.builds(
            lambda lib, doc: retrieval_pb2.DeleteDocumentRequest(library=lib, doc_id=doc),
            library,
            st.sampled_from(["d1", "d2", "d3", "nope"]),
        )
    if request_cls is retrieval_pb2.RetrieveRequest:
        return st.builds(
            lambda q, libs, filters, combine, mode, top_k, reranker, top_n: retrieval_pb2.RetrieveRequest(
                query=q,
                libraries=libs,
                filters=filters,
                combine=combine,
                mode=mode,
                top_k=top_k,
                reranker=reranker,
                rerank_top_n=top_n,
            ),
            _WORDS,
            st.lists(st.sampled_from([*FUZZ_LIBRARIES, FIXED_LIBRARY]), max_size=3),
            st.lists(_filter(), max_size=2),
            st.integers(0, 3),
            st.integers(0, 5),
            st.sampled_from([0, 1, 5, 50, 0, 1001]),
            st.sampled_from(["", "none", "length", "", "other"]),
            st.sampled_from([0, 1, 3, 0, -1]),
        )
    if request_cls is model_worker_pb2.EmbedPagesRequest:
        return st.builds(
            lambda n, dtype: model_worker_pb2.EmbedPagesRequest(images=[BLOBS[-1]] * n, dtype=dtype),
            st.integers(0, 3),
            st.integers(0, 3),
        )
    return None


class FakeSparse:
    def encode(self, texts: list[str]) -> list[dict[str, float]]:
        return [{w: 1.0 for w in t.lower().split()[:50]} for t in texts]


class FakeVisual:
    name = "fake-visual"
    dim = 8

    def embed_pages(self, images: Any) -> list[np.ndarray]:
        return [np.full((4, 8), 0.5, dtype=np.float32) for _ in images]

    def embed_queries(self, texts: Any) -> list[np.ndarray]:
        return [np.full((2, 8), float(len(t) % 7), dtype=np.float32) for t in texts]


@dataclass
class Live:
    front: retrieval_pb2_grpc.RetrievalServiceStub
    front_channel: grpc.Channel
    worker_channel: grpc.Channel
    front_address: str
    worker_address: str

    def assert_intact(self) -> None:
        for address in (self.front_address, self.worker_address):
            assert health_status(address) == 1, f"{address} is not SERVING after the fuzz run"
        for doc_id, text in FIXED.items():
            word = text.split()[1]
            request = retrieval_pb2.RetrieveRequest(
                query=word, libraries=[FIXED_LIBRARY], mode=retrieval_pb2.RETRIEVAL_MODE_LEXICAL, top_k=5
            )
            snippets = self.front.Retrieve(request, timeout=30).snippets
            assert [s.doc_id for s in snippets][:1] == [doc_id], f"{doc_id} is no longer retrievable"
            assert snippets[0].text == text


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    registry = ModelRegistry(
        embedding_spec="fake",
        sparse_spec="fake",
        reranker_spec="length",
        visual_spec="fakevis",
        factories=ModelFactories(
            embedding=lambda spec: CountingEmbedding(),
            reranker=lambda spec: LengthReranker(),
            sparse=lambda spec: FakeSparse(),
            visual=lambda spec: FakeVisual(),
        ),
    )
    worker = start_worker(registry, token="svc-token")
    front_settings = Settings(
        data_dir=str(tmp_path_factory.mktemp("fuzz") / "data"),
        retrieval_mode="hybrid",
        embedding="fake",
        reranker="length",
        worker_address=f"127.0.0.1:{worker.port}",
        worker_token="svc-token",
        visual_embedder="fakevis",
    )
    parts = build_front_parts(front_settings)
    front = start_front(front_settings, parts, port=free_port())
    front_address = f"127.0.0.1:{front.port}"
    front_channel = grpc.insecure_channel(front_address)
    worker_channel = grpc.insecure_channel(f"127.0.0.1:{worker.port}")
    stub = retrieval_pb2_grpc.RetrievalServiceStub(front_channel)
    docs = [retrieval_pb2.Document(doc_id=d, text=t, sensitivity="PUBLIC") for d, t in FIXED.items()]
    stub.Ingest(retrieval_pb2.IngestRequest(library=FIXED_LIBRARY, documents=docs), timeout=30)
    live = Live(stub, front_channel, worker_channel, front_address, f"127.0.0.1:{worker.port}")
    live.assert_intact()
    yield live
    front_channel.close()
    worker_channel.close()
    front.stop(0)
    parts.close()
    worker.stop(0)


def _status(call: Callable[..., Any], request: Any, metadata: Any = ()) -> grpc.StatusCode:
    try:
        call(request, timeout=30, metadata=metadata)
    except grpc.RpcError as exc:
        assert exc.code() not in FORBIDDEN, f"{exc.code()}: {exc.details()} for {request!r:.300}"
        return exc.code()
    return grpc.StatusCode.OK


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def _services() -> list[tuple[str, str, Any, Any, bool]]:
    """(service, method, request class, response class, client streaming) for every ragspine.v1 RPC."""
    out = []
    for module in (retrieval_pb2, model_worker_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                out.append(
                    (
                        service.full_name,
                        method.name,
                        GetMessageClass(method.input_type),
                        GetMessageClass(method.output_type),
                        method.client_streaming,
                    )
                )
    return out


RPCS = _services()


def test_every_rpc_is_covered() -> None:
    names = {f"{s}/{m}" for s, m, *_ in RPCS}
    assert {"ragspine.v1.RetrievalService/IngestStream", "ragspine.v1.ModelWorkerService/EmbedPages"} <= names
    assert len(RPCS) >= 13


@pytest.mark.parametrize(("service", "method", "request_cls", "response_cls", "streaming"), RPCS)
def test_fuzz_rpc(
    live: Live, service: str, method: str, request_cls: Any, response_cls: Any, streaming: bool
):
    worker = service.endswith("ModelWorkerService")
    channel = live.worker_channel if worker else live.front_channel
    path = f"/{service}/{method}"
    kwargs = {
        "request_serializer": request_cls.SerializeToString,
        "response_deserializer": response_cls.FromString,
    }
    call = channel.stream_unary(path, **kwargs) if streaming else channel.unary_unary(path, **kwargs)
    metadata = TOKEN if worker else ()
    codes: dict[grpc.StatusCode, int] = {}
    lock = threading.Lock()
    random = messages(request_cls.DESCRIPTOR)
    strategy = st.lists(random, max_size=5) if streaming else random
    valid = near_valid(request_cls)
    if valid is not None:
        strategy = st.one_of(strategy, valid, valid)

    @FUZZ
    @given(strategy)
    def run(request: Any) -> None:
        code = _status(call, iter(request) if streaming else request, metadata)
        with lock:
            codes[code] = codes.get(code, 0) + 1

    run()
    assert sum(codes.values()) >= 1
    # Run with -s to see how deep the fuzzer got (OK answers reach storage, filtering and fusion).
    print(f"{method}: {sorted((c.name, n) for c, n in codes.items())}")
    live.assert_intact()


@pytest.mark.parametrize(("service", "method", "request_cls", "response_cls", "streaming"), RPCS)
def test_fuzz_raw_bytes(
    live: Live, service: str, method: str, request_cls: Any, response_cls: Any, streaming: bool
):
    worker = service.endswith("ModelWorkerService")
    channel = live.worker_channel if worker else live.front_channel
    path = f"/{service}/{method}"
    call = channel.stream_unary(path) if streaming else channel.unary_unary(path)
    metadata = TOKEN if worker else ()

    @settings(FUZZ, max_examples=EXAMPLES // 3)
    @given(st.lists(st.binary(max_size=64), min_size=1, max_size=3) if streaming else st.binary(max_size=64))
    def run(payload: Any) -> None:
        _status(call, iter(payload) if streaming else payload, metadata)

    run()
    live.assert_intact()


def test_reverse_proof_the_checker_catches_internal(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the deserializer hook removed, malformed bytes are INTERNAL again and the fuzz check fails."""
    from ragspine_services.common import interceptor

    monkeypatch.setattr(interceptor, "tolerant_deserializer", lambda deserialize: deserialize)
    call = live.front_channel.unary_unary("/ragspine.v1.RetrievalService/Retrieve")

    @settings(FUZZ, max_examples=EXAMPLES)
    @given(st.binary(min_size=1, max_size=64))
    def run(payload: bytes) -> None:
        _status(call, payload)

    with pytest.raises(AssertionError, match="INTERNAL"):
        run()


def test_stored_corpus_survives_the_whole_run(live: Live) -> None:
    # Runs last in file order: the fixed documents outlived every fuzz test of the module.
    live.assert_intact()
