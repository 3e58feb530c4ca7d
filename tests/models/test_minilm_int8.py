"""The MiniLM with integer matrix products (the CPU default): vectors, model id, its cache, the settings
names that select it, the fallback to the packaged graph, and a library embedded by the earlier default."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

import logging

from ragspine.models import onnx_export, onnx_token_quant
from ragspine.models.dense import MiniLMInt8EmbeddingBackend, OnnxEmbeddingBackend
from ragspine.models.packaged import minilm_dir
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.indexing.codec import decode_dense
from ragspine.retrieval.indexing.ledger import model_id
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.vector import embedding_backends
from ragspine.retrieval.vector.embedding_backends import make_embedding_backend
from ragspine.settings import Settings

pytestmark = pytest.mark.slow

TEXTS = [
    "The cat sat on the mat.",
    "Aspirin reduces the risk of heart attack in adults over fifty, a large randomised trial found.",
    "Inflation rose faster than expected in the third quarter.",
    "Does vitamin D supplementation lower the rate of respiratory infections in children?",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("qint8-cache")


@pytest.fixture(scope="module")
def qint8(cache: Path) -> MiniLMInt8EmbeddingBackend:
    return MiniLMInt8EmbeddingBackend(cache_folder=cache, threads=2)


@pytest.fixture(scope="module")
def fp32() -> OnnxEmbeddingBackend:
    return OnnxEmbeddingBackend(int8=False, threads=2)


def _cosines(a: list[list[float]], b: list[list[float]]) -> np.ndarray:
    x, y = np.asarray(a), np.asarray(b)
    return (x * y).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))


def _count_quantisations(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    real = onnx_token_quant.quantise_per_token

    def counting(fp32_file: Path, out_file: Path) -> Path:
        calls.append(fp32_file)
        return real(fp32_file, out_file)

    monkeypatch.setattr(onnx_token_quant, "quantise_per_token", counting)
    return calls


def test_vectors_close_to_fp32(qint8: MiniLMInt8EmbeddingBackend, fp32: OnnxEmbeddingBackend) -> None:
    got, reference = qint8.embed_texts(TEXTS), fp32.embed_texts(TEXTS)
    assert qint8.dim == 384
    assert np.allclose(np.linalg.norm(np.asarray(got), axis=1), 1.0, atol=1e-5)
    assert _cosines(got, reference).min() >= 0.99
    # ...but it is a different model: not the fp32 vectors themselves.
    assert _cosines(got, reference).max() < 0.99999
    queries = qint8.embed_queries(TEXTS[:2])
    assert _cosines(queries, fp32.embed_queries(TEXTS[:2])).min() >= 0.99


def test_graph_runs_integer_matrix_products(qint8: MiniLMInt8EmbeddingBackend) -> None:
    onnx = pytest.importorskip("onnx")
    ops = [node.op_type for node in onnx.load(str(qint8._onnx_file)).graph.node]
    assert ops.count("MatMulIntegerToFloat") == 36  # 6 layers x (query, key, value, output, 2 feed-forward)
    assert "MatMul" in ops  # the attention products of two activations stay fp32
    assert "DynamicQuantizeLinear" not in ops and "IsNaN" not in ops


LONG = "Results of a randomised controlled trial of 4,000 adults: " + "blood pressure fell. " * 40


def _alone_and_in_batch(backend: OnnxEmbeddingBackend) -> tuple[np.ndarray, np.ndarray]:
    alone = np.asarray(backend.embed_texts(TEXTS[:1]))
    in_batch = np.asarray(backend.embed_texts([TEXTS[0], LONG, TEXTS[1]]))[:1]
    return alone, in_batch


def test_a_vector_does_not_depend_on_its_batch(qint8: MiniLMInt8EmbeddingBackend) -> None:
    alone, in_batch = _alone_and_in_batch(qint8)
    assert np.array_equal(alone, in_batch)


def test_reverse_proof_activations_scaled_per_batch_move_with_the_batch(
    fp32: OnnxEmbeddingBackend, tmp_path: Path
) -> None:
    """onnxruntime's dynamic quantisation (one activation scale per batch) fails the check above."""
    per_batch = onnx_export.quantise_int8(fp32._onnx_file, tmp_path / "per-batch.onnx")
    alone, in_batch = _alone_and_in_batch(
        OnnxEmbeddingBackend(per_batch, tokenizer_path=minilm_dir(), threads=1)
    )
    assert not np.array_equal(alone, in_batch)


def test_model_id_differs_from_minilm(qint8: MiniLMInt8EmbeddingBackend, fp32: OnnxEmbeddingBackend) -> None:
    packaged = OnnxEmbeddingBackend(threads=1)
    ids = {model_id(qint8), model_id(fp32), model_id(packaged)}
    assert len(ids) == 3
    assert model_id(qint8) == "all-MiniLM-L6-v2-onnx-qint8-token"
    assert qint8.languages == frozenset({"en"})


def test_second_open_reuses_the_cache(
    qint8: MiniLMInt8EmbeddingBackend, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = qint8._onnx_file
    assert built.parent == cache and built.is_file()
    stamp = built.stat().st_mtime_ns
    calls = _count_quantisations(monkeypatch)
    again = MiniLMInt8EmbeddingBackend(cache_folder=cache, threads=1)
    assert calls == []
    assert again._onnx_file == built and built.stat().st_mtime_ns == stamp
    assert _cosines(again.embed_texts(TEXTS[:1]), qint8.embed_texts(TEXTS[:1]))[0] > 0.9999


@pytest.mark.parametrize("damage", ["truncate", "garbage", "digest"])
def test_damaged_cache_is_rebuilt(
    qint8: MiniLMInt8EmbeddingBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    reference = qint8.embed_texts(TEXTS)
    first = MiniLMInt8EmbeddingBackend(cache_folder=tmp_path, threads=1)._onnx_file
    if damage == "truncate":
        first.write_bytes(first.read_bytes()[: first.stat().st_size // 2])
    elif damage == "garbage":
        first.write_bytes(b"not an onnx graph")
    else:
        first.with_name(first.name + ".sha256").write_text("0" * 64 + "\n")
    calls = _count_quantisations(monkeypatch)
    rebuilt = MiniLMInt8EmbeddingBackend(cache_folder=tmp_path, threads=1)
    assert calls == []  # rebuilt in a child process, not in this one
    assert rebuilt._onnx_file == first
    assert first.with_name(first.name + ".sha256").read_text().strip() == onnx_export._sha256(first)
    assert _cosines(rebuilt.embed_texts(TEXTS), reference).min() > 0.9999


def test_unwritable_cache_fails_clearly(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OSError):
        MiniLMInt8EmbeddingBackend(cache_folder=blocker / "sub", threads=1)


def test_rejects_a_model_path() -> None:
    with pytest.raises(ValueError, match="model_path"):
        MiniLMInt8EmbeddingBackend(model_path="/tmp/x.onnx")


def test_settings_name_accepted_and_typo_refused(
    cache: Path, qint8: MiniLMInt8EmbeddingBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSPINE_EMBEDDING", "minilm-int8")
    monkeypatch.delenv("RAGSPINE_EMBEDDING_BACKEND", raising=False)
    settings = Settings.from_env()
    backend = make_embedding_backend(settings=settings, cache_folder=cache, threads=1)
    assert isinstance(backend, MiniLMInt8EmbeddingBackend)
    assert model_id(backend) == model_id(qint8)
    with pytest.raises(ValueError, match=r"unknown embedding backend 'minilm-int9'.*minilm-int8"):
        make_embedding_backend("minilm-int9")


def test_concurrent_builds_quantise_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    calls = _count_quantisations(monkeypatch)
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(onnx_export.minilm_qint8(tmp_path))) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1  # the second builder waited on the lock, then found the finished file
    assert len(results) == 2 and results[0] == results[1] and results[0].is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [
        results[0].name,
        results[0].name + ".sha256",
    ]


PACKAGED_ID = "all-MiniLM-L6-v2-onnx-int8"
INTEGER_ID = "all-MiniLM-L6-v2-onnx-qint8-token"


@pytest.mark.parametrize("spec", ["auto", "onnx", "minilm", "fastembed"])
def test_default_names_give_integer_products_on_a_cpu(
    spec: str, cache: Path, qint8: MiniLMInt8EmbeddingBackend
) -> None:
    backend = make_embedding_backend(spec, cache_folder=cache, threads=1)
    assert isinstance(backend, MiniLMInt8EmbeddingBackend)
    assert model_id(backend) == INTEGER_ID
    assert np.array_equal(np.asarray(backend.embed_texts(TEXTS)), np.asarray(qint8.embed_texts(TEXTS)))


def test_minilm_packaged_is_the_graph_as_shipped() -> None:
    backend = make_embedding_backend("minilm-packaged", threads=1)
    assert type(backend) is OnnxEmbeddingBackend and model_id(backend) == PACKAGED_ID
    same = OnnxEmbeddingBackend(threads=1)
    assert np.array_equal(np.asarray(backend.embed_texts(TEXTS)), np.asarray(same.embed_texts(TEXTS)))


def test_off_the_cpu_or_for_another_model_the_graph_as_shipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A CUDA session gets the float graph (onnxruntime's integer products are CPU kernels); so does a
    call that names another model file, and nothing is built in either case."""
    calls = _count_quantisations(monkeypatch)
    monkeypatch.setattr(embedding_backends, "_runs_on_cpu", lambda device: False)
    on_gpu = make_embedding_backend("auto", cache_folder=tmp_path, threads=1)
    assert type(on_gpu) is OnnxEmbeddingBackend and model_id(on_gpu) == PACKAGED_ID
    monkeypatch.undo()
    calls = _count_quantisations(monkeypatch)
    named = make_embedding_backend("onnx", int8=True, threads=1)
    assert type(named) is OnnxEmbeddingBackend and model_id(named) == PACKAGED_ID
    assert calls == [] and list(tmp_path.iterdir()) == []


def test_a_failed_build_falls_back_to_the_graph_as_shipped_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def no_torch(folder: Path | None = None) -> Path:
        raise ImportError("No module named 'torch'")

    monkeypatch.setattr(onnx_export, "minilm_qint8_isolated", no_torch)
    with caplog.at_level(logging.WARNING, logger=embedding_backends.__name__):
        backend = make_embedding_backend("auto", cache_folder=tmp_path, threads=1)
    assert type(backend) is OnnxEmbeddingBackend and model_id(backend) == PACKAGED_ID
    assert "integer MiniLM could not be built" in caplog.text and "torch" in caplog.text
    # Asked for by name, the integer model does not fall back: the caller learns why.
    with pytest.raises(ImportError, match="torch"):
        make_embedding_backend("minilm-int8", cache_folder=tmp_path, threads=1)


def test_a_library_of_the_earlier_default_is_embedded_again_never_mixed(
    tmp_path: Path, cache: Path, qint8: MiniLMInt8EmbeddingBackend
) -> None:
    """A library embedded with the packaged graph (the default of earlier releases) and opened with the
    default: every chunk waits for a new vector, the answer says partial meanwhile, and once drained
    only the integer model's vectors are stored."""
    path = tmp_path / "lib.sqlite"
    with ChunkStore(path) as store:
        earlier = NarrativeIndex(store, embedding_backend=OnnxEmbeddingBackend(threads=1))
        earlier.ingest_many([(text, DocumentMeta(doc_id=f"d{i}")) for i, text in enumerate(TEXTS)])
        earlier.warm()
        n = store.count_vectors("dense")
        assert n == len(TEXTS) and store.vector_space("dense").model == PACKAGED_ID
    with ChunkStore(path) as store:
        default = make_embedding_backend("auto", cache_folder=cache, threads=1)
        upgraded = NarrativeIndex(store, embedding_backend=default, defer_vectors=True)
        assert upgraded.pending_vectors() == n
        report = upgraded.retrieve_report("aspirin heart attack", top_k=3, rerank=False)
        assert report.partial and report.pending == n and report.results
        while upgraded.drain_step(max_items=2):
            pass
        assert upgraded.pending_vectors() == 0
        assert store.vector_space("dense").model == INTEGER_ID
        assert store.load_vectors("dense", PACKAGED_ID) == {}
        stored = store.load_vectors("dense", INTEGER_ID)
        assert len(stored) == n
        for chunk_id, (_, vector) in stored.items():
            text = upgraded.retriever.index_text(upgraded.retriever._chunks[chunk_id])
            assert np.allclose(decode_dense(vector), qint8.embed_texts([text])[0], atol=1e-6)


def test_the_first_build_runs_in_a_child_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server started once on an empty cache must not hold torch for weeks: the build runs in a child,
    this process only opens the finished file."""
    calls = _count_quantisations(monkeypatch)
    built = onnx_export.minilm_qint8_isolated(tmp_path)
    assert calls == [] and built.is_file() and built.parent == tmp_path
    assert built.with_name(built.name + ".sha256").read_text().strip() == onnx_export._sha256(built)
    stamp = built.stat().st_mtime_ns
    assert onnx_export.minilm_qint8_isolated(tmp_path) == built and built.stat().st_mtime_ns == stamp


def test_a_failing_child_build_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setattr(
        onnx_export, "_CHILD", [sys.executable, "-c", "import sys; sys.exit('No module named torch')"]
    )
    with pytest.raises(ValueError, match="integer MiniLM could not be built: No module named torch"):
        onnx_export.minilm_qint8_isolated(tmp_path)
    monkeypatch.setattr(onnx_export, "_CHILD", [sys.executable, "-c", "print('/elsewhere/model.onnx')"])
    with pytest.raises(ValueError, match=r"reported '/elsewhere/model\.onnx'"):
        onnx_export.minilm_qint8_isolated(tmp_path)
