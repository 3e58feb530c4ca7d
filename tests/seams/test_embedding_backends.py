"""Embedding backends: deterministic hashing, the OpenAI client against a local fake, and factory dispatch."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from ragspine.retrieval.vector import embedding_backends as eb
from ragspine.retrieval.vector.embedding_backends import (
    DeterministicEmbeddingBackend,
    OpenAIEmbeddingBackend,
    make_embedding_backend,
)
from ragspine.settings import Settings
from tests.seams.conftest import FakeOpenAIServer


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


class TestDeterministic:
    def test_unit_vectors_of_the_requested_dimension(self) -> None:
        vectors = DeterministicEmbeddingBackend(dim=64).embed_texts(
            ["revenue fell in 2024", "营收下滑", "", "!!!"]
        )
        assert [len(v) for v in vectors] == [64] * 4
        for v in vectors:
            assert math.sqrt(sum(x * x for x in v)) == pytest.approx(1.0)

    def test_shared_tokens_mean_higher_cosine(self) -> None:
        a, b, c = DeterministicEmbeddingBackend().embed_texts(
            ["acme revenue fell sharply", "why did acme revenue fall", "the weather was sunny"]
        )
        assert cosine(a, b) > cosine(a, c)

    def test_same_vectors_in_another_process(self) -> None:
        texts = ["ACME 营收下滑 2024", "hello world"]
        here = DeterministicEmbeddingBackend(dim=32).embed_texts(texts)
        code = (
            "import json; from ragspine.retrieval.vector.embedding_backends import "
            "DeterministicEmbeddingBackend as D;"
            f"print(json.dumps(D(dim=32).embed_texts({texts!r})))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": "123"},
        )
        assert json.loads(out.stdout) == here

    @pytest.mark.parametrize("dim", [0, -3, 2.5, True])
    def test_bad_dim(self, dim: object) -> None:
        with pytest.raises(ValueError, match="dim must be a positive integer"):
            DeterministicEmbeddingBackend(dim=dim)  # type: ignore[arg-type]

    def test_bad_texts(self) -> None:
        with pytest.raises(ValueError, match="list of strings"):
            DeterministicEmbeddingBackend().embed_texts("a string")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"texts\[1\]"):
            DeterministicEmbeddingBackend().embed_texts(["ok", 3])  # type: ignore[list-item]


def embeddings_reply(body: Any, *, reverse: bool = True) -> tuple[int, bytes]:
    """Fake embeddings [len(text), index], listed in reverse: the client must order by 'index'."""
    items = [{"index": i, "embedding": [float(len(t)), float(i)]} for i, t in enumerate(body["input"])]
    return 200, json.dumps({"data": items[::-1] if reverse else items}).encode()


class TestOpenAI:
    def test_batches_and_orders_by_index(self, fake_openai: FakeOpenAIServer) -> None:
        fake_openai.handler = lambda path, body: embeddings_reply(body)
        backend = OpenAIEmbeddingBackend(fake_openai.url, api_key="sk-test", model="m", batch_size=2)
        vectors = backend.embed_texts(["a", "bb", "ccc", "dddd", "eeeee"])
        assert [v[0] for v in vectors] == [1.0, 2.0, 3.0, 4.0, 5.0]
        assert [r["json"]["input"] for r in fake_openai.requests] == [["a", "bb"], ["ccc", "dddd"], ["eeeee"]]
        first = fake_openai.requests[0]
        assert first["path"] == "/v1/embeddings"
        assert first["json"]["model"] == "m"
        assert first["headers"]["Authorization"] == "Bearer sk-test"

    def test_no_texts_no_request(self, fake_openai: FakeOpenAIServer) -> None:
        assert OpenAIEmbeddingBackend(fake_openai.url).embed_texts([]) == []
        assert fake_openai.requests == []

    def test_http_500_reports_status_and_body(self, fake_openai: FakeOpenAIServer) -> None:
        fake_openai.handler = lambda path, body: (500, b'{"error": "model overloaded"}')
        with pytest.raises(RuntimeError, match=r"HTTP 500.*model overloaded"):
            OpenAIEmbeddingBackend(fake_openai.url).embed_texts(["x"])

    def test_malformed_json(self, fake_openai: FakeOpenAIServer) -> None:
        fake_openai.handler = lambda path, body: (200, b"<html>not json</html>")
        with pytest.raises(RuntimeError, match=r"not JSON: <html>"):
            OpenAIEmbeddingBackend(fake_openai.url).embed_texts(["x"])

    @pytest.mark.parametrize(
        ("payload", "message"),
        [
            ({"nope": []}, "no 'data' list"),
            ({"data": [{"index": 0}]}, "integer 'index'"),
            ({"data": [{"index": 1, "embedding": [1.0]}]}, r"indices \[1\] for 1 inputs"),
            ({"data": [{"index": 0, "embedding": ["x"]}]}, "non-numeric"),
        ],
    )
    def test_incomplete_replies(self, fake_openai: FakeOpenAIServer, payload: Any, message: str) -> None:
        fake_openai.reply_json(payload)
        with pytest.raises(RuntimeError, match=message):
            OpenAIEmbeddingBackend(fake_openai.url).embed_texts(["x"])

    def test_timeout(self, fake_openai: FakeOpenAIServer) -> None:
        fake_openai.handler = lambda path, body: embeddings_reply(body)
        fake_openai.delay_s = 1.0
        with pytest.raises(RuntimeError, match=r"timed out after 0.2 s"):
            OpenAIEmbeddingBackend(fake_openai.url, timeout_s=0.2).embed_texts(["x"])

    def test_connection_refused(self) -> None:
        with pytest.raises(RuntimeError, match="failed"):
            OpenAIEmbeddingBackend("http://127.0.0.1:9/v1", timeout_s=2).embed_texts(["x"])

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"base_url": "localhost:8000"}, "http"),
            ({"base_url": "http://x", "batch_size": 0}, "batch_size"),
            ({"base_url": "http://x", "timeout_s": 0}, "timeout_s"),
        ],
    )
    def test_bad_arguments(self, kwargs: dict[str, Any], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            OpenAIEmbeddingBackend(**kwargs)


class _FakeModel:
    def __init__(self, kind: str, **kwargs: Any) -> None:
        self.kind, self.kwargs = kind, kwargs

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] for _ in texts]


def _fake_class(name: str, base: type = _FakeModel) -> type:
    return type(name, (base,), {"__init__": lambda self, _n=name, **kw: _FakeModel.__init__(self, _n, **kw)})


@pytest.fixture()
def fake_dense(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    module = types.ModuleType("ragspine.models.dense")
    names = ("OnnxEmbeddingBackend", "SentenceTransformerEmbeddingBackend", "E5EmbeddingBackend")
    classes = {name: _fake_class(name) for name in names}
    # As in the real module, the integer MiniLM is a kind of OnnxEmbeddingBackend.
    classes["MiniLMInt8EmbeddingBackend"] = _fake_class(
        "MiniLMInt8EmbeddingBackend", classes["OnnxEmbeddingBackend"]
    )
    for name, cls in classes.items():
        setattr(module, name, cls)
    monkeypatch.setitem(sys.modules, "ragspine.models.dense", module)
    yield module


@pytest.fixture()
def seen_devices(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Devices the factory asked about, in order; only ``"cpu"`` runs on the CPU (any other is a GPU)."""
    seen: list[str] = []

    def on_cpu(device: str) -> bool:
        seen.append(device)
        return device == "cpu"

    monkeypatch.setattr(eb, "_runs_on_cpu", on_cpu)
    return seen


@pytest.fixture()
def missing_dense(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes "import ragspine.models.dense" raise ImportError.
    monkeypatch.setitem(sys.modules, "ragspine.models.dense", None)


class TestFactory:
    @pytest.mark.parametrize(
        ("spec", "cls"),
        [
            ("onnx", "MiniLMInt8EmbeddingBackend"),
            ("FastEmbed", "MiniLMInt8EmbeddingBackend"),
            ("minilm", "MiniLMInt8EmbeddingBackend"),
            ("minilm-packaged", "OnnxEmbeddingBackend"),
            ("minilm-int8", "MiniLMInt8EmbeddingBackend"),
            ("MiniLM_INT8", "MiniLMInt8EmbeddingBackend"),
            ("st", "SentenceTransformerEmbeddingBackend"),
            ("sentence-transformers", "SentenceTransformerEmbeddingBackend"),
            ("QWEN3", "SentenceTransformerEmbeddingBackend"),
            ("e5", "E5EmbeddingBackend"),
            ("multilingual", "E5EmbeddingBackend"),
            ("multilingual-e5", "E5EmbeddingBackend"),
            ("auto", "MiniLMInt8EmbeddingBackend"),
        ],
    )
    def test_model_names_dispatch_to_models_dense(
        self, fake_dense: types.ModuleType, spec: str, cls: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(eb, "_runs_on_cpu", lambda device: True)
        backend = make_embedding_backend(spec, max_length=64)
        assert isinstance(backend, _FakeModel)
        assert backend.kind == cls
        assert backend.kwargs == {"max_length": 64}

    @pytest.mark.parametrize("spec", ["auto", "onnx", "minilm"])
    def test_the_packaged_minilm_off_the_cpu_or_for_another_file_is_the_graph_as_shipped(
        self, fake_dense: types.ModuleType, spec: str, seen_devices: list[str]
    ) -> None:
        seen = seen_devices
        backend = make_embedding_backend(spec, device="cuda", cache_folder="/nowhere")
        assert isinstance(backend, _FakeModel) and backend.kind == "OnnxEmbeddingBackend"
        assert backend.kwargs == {"device": "cuda"}  # the integer model's cache folder is not passed on
        assert make_embedding_backend(spec, device="cpu").kind == "MiniLMInt8EmbeddingBackend"
        assert seen == ["cuda", "cpu"]
        named = make_embedding_backend(spec, model_path="/m.onnx", device="cpu")
        assert named.kind == "OnnxEmbeddingBackend" and seen == ["cuda", "cpu"]

    def test_the_services_device_picks_the_packaged_minilm_graph(
        self, fake_dense: types.ModuleType, seen_devices: list[str]
    ) -> None:
        from ragspine.settings import Settings

        seen = seen_devices
        on_gpu = make_embedding_backend("auto", settings=Settings(device="cuda"))
        assert on_gpu.kind == "OnnxEmbeddingBackend" and on_gpu.kwargs == {"device": "cuda"}
        cpu = make_embedding_backend(settings=Settings(embedding="minilm", device="cpu"))
        assert cpu.kind == "MiniLMInt8EmbeddingBackend" and cpu.kwargs == {"device": "cpu"}
        given = make_embedding_backend("onnx", settings=Settings(device="cuda"), device="cpu")
        assert given.kwargs == {"device": "cpu"}  # an explicit argument wins over the settings
        default = make_embedding_backend("auto", settings=Settings())
        assert default.kwargs == {}
        assert seen == ["cuda", "cpu", "cpu", "auto"]

    @pytest.mark.parametrize("spec", ["auto", "onnx", "minilm"])
    def test_an_onnx_backend_put_in_place_is_what_the_names_give(
        self, fake_dense: types.ModuleType, spec: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """These names promise an OnnxEmbeddingBackend: a caller who replaced that class (a stand-in in a
        test, a subclass of their own) gets it, not the integer MiniLM beside it."""
        monkeypatch.setattr(eb, "_runs_on_cpu", lambda device: True)
        monkeypatch.setattr(fake_dense, "OnnxEmbeddingBackend", _fake_class("MyOnnx"))
        backend = make_embedding_backend(spec, max_length=64)
        assert backend.kind == "MyOnnx" and backend.kwargs == {"max_length": 64}
        assert make_embedding_backend("minilm-int8").kind == "MiniLMInt8EmbeddingBackend"

    def test_the_integer_minilm_failing_to_build_falls_back_with_a_warning(
        self, fake_dense: types.ModuleType, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        def cannot_build(self: Any, **kwargs: Any) -> None:
            raise ValueError("export failed: disk full")

        # Still a kind of the module's OnnxEmbeddingBackend, so the factory tries it first.
        cannot = type("CannotBuild", (fake_dense.OnnxEmbeddingBackend,), {"__init__": cannot_build})
        monkeypatch.setattr(eb, "_runs_on_cpu", lambda device: True)
        monkeypatch.setattr(fake_dense, "MiniLMInt8EmbeddingBackend", cannot)
        with caplog.at_level("WARNING", logger=eb.__name__):
            backend = make_embedding_backend("auto", max_length=64)
        assert backend.kind == "OnnxEmbeddingBackend" and backend.kwargs == {"max_length": 64}
        assert "could not be built (export failed: disk full)" in caplog.text
        with pytest.raises(ValueError, match="disk full"):
            make_embedding_backend("minilm-int8")

    def test_lazy_module_attributes(self, fake_dense: types.ModuleType) -> None:
        assert eb.OnnxEmbeddingBackend is fake_dense.OnnxEmbeddingBackend
        with pytest.raises(AttributeError):
            _ = eb.NoSuchBackend

    @pytest.mark.parametrize("spec", ["onnx", "st", "e5"])
    def test_missing_extra_names_the_install_command(self, missing_dense: None, spec: str) -> None:
        with pytest.raises(
            ImportError,
            match=rf"embedding backend '{spec}' needs the models extra: pip install 'ragspine\[models\]'",
        ):
            make_embedding_backend(spec)

    def test_runtime_import_error_inside_the_backend_names_the_extra(
        self, fake_dense: types.ModuleType, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def no_runtime(**kwargs: Any) -> None:
            raise ImportError("No module named 'onnxruntime'")

        monkeypatch.setattr(fake_dense, "OnnxEmbeddingBackend", no_runtime)
        monkeypatch.setattr(fake_dense, "MiniLMInt8EmbeddingBackend", no_runtime)
        with pytest.raises(ImportError, match=r"ragspine\[models\].*onnxruntime"):
            make_embedding_backend("onnx")

    def test_auto_falls_back_to_none_without_the_extra_or_the_model(
        self, missing_dense: None, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        assert make_embedding_backend("auto") is None
        module = types.ModuleType("ragspine.models.dense")

        def broken_model(**kwargs: Any) -> None:
            raise ValueError("model file not found")

        module.OnnxEmbeddingBackend = broken_model  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "ragspine.models.dense", module)
        assert make_embedding_backend("auto") is None

    def test_lazy_attribute_without_the_extra(self, missing_dense: None) -> None:
        with pytest.raises(ImportError, match="models extra"):
            _ = eb.E5EmbeddingBackend

    def test_none_deterministic_and_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        assert make_embedding_backend("none") is None
        assert isinstance(make_embedding_backend("Deterministic", dim=8), DeterministicEmbeddingBackend)
        monkeypatch.delenv("RAGSPINE_EMBEDDING_BACKEND", raising=False)
        monkeypatch.delenv("RAGSPINE_EMBEDDING", raising=False)
        assert make_embedding_backend() is None  # published: None -> None (pure BM25), not "auto"
        # The service layer's selector is not the library call's default ...
        monkeypatch.setenv("RAGSPINE_EMBEDDING", "deterministic")
        assert make_embedding_backend() is None
        # ... but it is what the service's settings select.
        assert isinstance(make_embedding_backend(settings=Settings.from_env()), DeterministicEmbeddingBackend)
        monkeypatch.setenv("RAGSPINE_EMBEDDING_BACKEND", "deterministic")  # the spec's variable
        assert isinstance(make_embedding_backend(), DeterministicEmbeddingBackend)

    def test_openai_from_kwargs_or_settings(self, monkeypatch: pytest.MonkeyPatch) -> None:
        backend = make_embedding_backend("openai", base_url="http://127.0.0.1:1/v1", batch_size=3)
        assert isinstance(backend, OpenAIEmbeddingBackend)
        assert (backend.base_url, backend.model, backend.batch_size) == (
            "http://127.0.0.1:1/v1",
            "text-embedding-3-small",
            3,
        )
        env = {
            "RAGSPINE_OPENAI_BASE_URL": "http://emb.local/v1",
            "RAGSPINE_OPENAI_API_KEY": "k",
            "RAGSPINE_OPENAI_EMBEDDING_MODEL": "bge",
        }
        backend = make_embedding_backend("openai", settings=Settings.from_env(env))
        assert isinstance(backend, OpenAIEmbeddingBackend)
        assert (backend.base_url, backend.api_key, backend.model) == ("http://emb.local/v1", "k", "bge")
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        # The spec's environment default: with neither spec nor settings, the environment picks the
        # backend and, for openai, its options.
        monkeypatch.setenv("RAGSPINE_EMBEDDING_BACKEND", "openai")
        backend = make_embedding_backend()
        assert isinstance(backend, OpenAIEmbeddingBackend)
        assert (backend.base_url, backend.api_key, backend.model) == ("http://emb.local/v1", "k", "bge")
        # A spec given without settings takes the defaults, not the environment.
        with pytest.raises(ValueError, match="needs a base URL"):
            make_embedding_backend("openai")

    def test_openai_without_base_url(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("RAGSPINE_OPENAI_BASE_URL", raising=False)
        with pytest.raises(ValueError, match="RAGSPINE_OPENAI_BASE_URL"):
            make_embedding_backend("openai")

    def test_unknown_lists_choices(self) -> None:
        with pytest.raises(ValueError, match="none, auto, deterministic, openai, onnx"):
            make_embedding_backend("word2vec")
