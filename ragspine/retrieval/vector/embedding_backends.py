"""Embedding backends for the vector channel and the factory that selects one.

The library default is no backend (pure BM25 + RRF). The model backends live in ``ragspine.models.dense``
and need the ``models`` extra; they are imported only when asked for, so this module imports with numpy
alone. ``from ragspine.retrieval.vector.embedding_backends import OnnxEmbeddingBackend`` still works: the
names are resolved lazily.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import math
from collections.abc import Sequence
from typing import Any

from ragspine.retrieval.llm.providers import post_json
from ragspine.retrieval.seams import EmbeddingBackend
from ragspine.retrieval.text.tokenizer import tokenize
from ragspine.settings import OFF, Settings, choice, spec_env_default

log = logging.getLogger(__name__)

EMBEDDING_CHOICES: tuple[str, ...] = (
    "none",
    "auto",
    "deterministic",
    "openai",
    "onnx",
    "fastembed",
    "minilm",
    "minilm-int8",
    "minilm-packaged",
    "st",
    "sentence-transformers",
    "qwen3",
    "e5",
    "multilingual",
    "multilingual-e5",
)

# spec alias -> class name in ragspine.models.dense
_MODEL_BACKENDS: dict[str, str] = {
    "onnx": "OnnxEmbeddingBackend",
    "fastembed": "OnnxEmbeddingBackend",
    "minilm": "OnnxEmbeddingBackend",
    "minilm-int8": "MiniLMInt8EmbeddingBackend",
    "minilm_int8": "MiniLMInt8EmbeddingBackend",
    "minilm-packaged": "OnnxEmbeddingBackend",
    "minilm_packaged": "OnnxEmbeddingBackend",
    "st": "SentenceTransformerEmbeddingBackend",
    "sentence-transformers": "SentenceTransformerEmbeddingBackend",
    "sentence_transformers": "SentenceTransformerEmbeddingBackend",
    "qwen3": "SentenceTransformerEmbeddingBackend",
    "e5": "E5EmbeddingBackend",
    "multilingual": "E5EmbeddingBackend",
    "multilingual-e5": "E5EmbeddingBackend",
    "multilingual_e5": "E5EmbeddingBackend",
}
_LAZY_NAMES = frozenset(_MODEL_BACKENDS.values())
# Names of the packaged MiniLM that run it with integer matrix products on a CPU (``_packaged_minilm``).
_PACKAGED_MINILM = frozenset({"auto", "onnx", "fastembed", "minilm"})
# Arguments that name another model or the graph as shipped: the integer model is not built for them.
_NOT_PACKAGED_DEFAULT = ("model_path", "int8", "tokenizer_path")
_DENSE_MODULE = "ragspine.models.dense"

# The token no tokenizer output can equal; texts without tokens embed along its direction.
_EMPTY_TOKEN = "\x00"


def _check_texts(texts: object) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise ValueError(f"texts must be a list of strings, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"texts[{i}] must be a string, got {type(text).__name__}")
    return list(texts)


class DeterministicEmbeddingBackend:
    """Offline, dependency-free vectors: a signed bag of hashed tokens, L2-normalised.

    Each token of ``tokenize(text)`` adds ±1 to one of ``dim`` slots, both chosen by BLAKE2b of the token,
    so vectors are identical across processes and machines (unlike Python's salted ``hash``). Texts that
    share tokens get a positive cosine: lexical-ish, but a real vector backend for tests and laptop mode.
    A text without tokens maps to a fixed unit vector, never a zero vector. Raises ``ValueError`` for a
    ``dim`` below 1 or for non-string input.
    """

    name = "deterministic"

    def __init__(self, dim: int = 256) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        self.dim = dim

    def _slot(self, token: str) -> tuple[int, float]:
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8, person=b"ragspine-embed").digest()
        return int.from_bytes(digest[:4], "big") % self.dim, (1.0 if digest[4] & 1 else -1.0)

    def _embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for token in tokenize(text) or [_EMPTY_TOKEN]:
            slot, sign = self._slot(token)
            vector[slot] += sign
        norm = math.sqrt(sum(v * v for v in vector))
        if norm == 0.0:
            # Opposite signs cancelled out exactly; fall back to the empty-text direction.
            slot, sign = self._slot(_EMPTY_TOKEN)
            vector[slot], norm = sign, 1.0
        return [v / norm for v in vector]

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        """One ``dim``-long unit vector per text, in order."""
        return [self._embed_one(text) for text in _check_texts(texts)]


class OpenAIEmbeddingBackend:
    """Embeddings from an OpenAI-compatible server (``POST {base_url}/embeddings``, stdlib only).

    Texts go out in batches of ``batch_size``; vectors come back in input order (the reply's ``index``
    decides, not its list order). ``timeout_s`` bounds each request in seconds. Raises ``ValueError`` for
    bad arguments or input, and ``RuntimeError`` for HTTP errors (status and body excerpt), timeouts and
    replies that miss an index or mix dimensions.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: str = "",
        model: str = "text-embedding-3-small",
        *,
        timeout_s: float = 30,
        batch_size: int = 64,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"base_url must be an http(s) URL such as 'https://api.openai.com/v1', got {base_url!r}"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not timeout_s > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.timeout_s = float(timeout_s)
        self.batch_size = batch_size

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order; ``[]`` without a request for no texts."""
        texts = _check_texts(texts)
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(self._embed_batch(texts[start : start + self.batch_size]))
        dims = {len(v) for v in vectors}
        if len(dims) > 1:
            raise RuntimeError(f"embedding server returned vectors of mixed dimensions {sorted(dims)}")
        return vectors

    def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        url = f"{self.base_url}/embeddings"
        reply = post_json(
            url, {"model": self.model, "input": batch}, api_key=self.api_key, timeout_s=self.timeout_s
        )
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list):
            raise RuntimeError(f"POST {url} returned no 'data' list")
        by_index: dict[int, list[float]] = {}
        for item in data:
            index = item.get("index") if isinstance(item, dict) else None
            embedding = item.get("embedding") if isinstance(item, dict) else None
            if isinstance(index, bool) or not isinstance(index, int) or not isinstance(embedding, list):
                raise RuntimeError(
                    f"POST {url} returned an item without an integer 'index' and an 'embedding' list"
                )
            try:
                by_index[index] = [float(x) for x in embedding]
            except (TypeError, ValueError):
                raise RuntimeError(f"POST {url} returned a non-numeric embedding at index {index}") from None
        if sorted(by_index) != list(range(len(batch))):
            raise RuntimeError(f"POST {url} returned indices {sorted(by_index)} for {len(batch)} inputs")
        return [by_index[i] for i in range(len(batch))]


def _needs_models_extra(spec: str, exc: ImportError) -> ImportError:
    """The error for a model backend whose module or runtime (torch, onnxruntime) does not import."""
    return ImportError(
        f"embedding backend {spec!r} needs the models extra: pip install 'ragspine[models]' ({exc})"
    )


def _dense_module(spec: str) -> Any:
    """``ragspine.models.dense``, or ImportError naming the extra (this or one of its runtimes is missing)."""
    try:
        return importlib.import_module(_DENSE_MODULE)
    except ImportError as exc:
        raise _needs_models_extra(spec, exc) from exc


def _runs_on_cpu(device: str) -> bool:
    """True when an onnxruntime session asked for ``device`` would run on the CPU provider."""
    from ragspine.models.device import onnx_providers

    return onnx_providers(device)[0] == "CPUExecutionProvider"


def _integer_is_onnx(spec: str) -> bool:
    """True when the integer MiniLM is a kind of the module's ``OnnxEmbeddingBackend``: these names
    promise an ``OnnxEmbeddingBackend``, so one put in its place (a subclass, a stand-in) is used as is."""
    module = _dense_module(spec)
    onnx, integer = (
        getattr(module, "OnnxEmbeddingBackend", None),
        getattr(module, "MiniLMInt8EmbeddingBackend", None),
    )
    return isinstance(onnx, type) and isinstance(integer, type) and issubclass(integer, onnx)


def _packaged_minilm(spec: str, kwargs: dict[str, Any]) -> EmbeddingBackend:
    """The packaged MiniLM: integer matrix products on a CPU, the graph as shipped elsewhere (see
    ``make_embedding_backend``). ``cache_folder`` (where the integer model is built) is for that model
    alone."""
    shipped = {k: v for k, v in kwargs.items() if k != "cache_folder"}
    if any(k in kwargs for k in _NOT_PACKAGED_DEFAULT):
        return _model_backend(spec, "OnnxEmbeddingBackend", shipped)
    try:
        on_cpu = _runs_on_cpu(str(kwargs.get("device", "auto")))
    except ImportError as exc:
        raise _needs_models_extra(spec, exc) from exc
    if not on_cpu or not _integer_is_onnx(spec):
        return _model_backend(spec, "OnnxEmbeddingBackend", shipped)
    try:
        return _model_backend(spec, "MiniLMInt8EmbeddingBackend", dict(kwargs))
    except Exception as exc:  # a failed export (torch missing, disk, ...) keeps the service semantic
        log.warning(
            "embedding %r: the integer MiniLM could not be built (%s); using the packaged graph as shipped, "
            "whose vectors are kept under their own model id",
            spec,
            exc,
        )
        return _model_backend(spec, "OnnxEmbeddingBackend", shipped)


def _model_backend(spec: str, class_name: str, kwargs: dict[str, Any]) -> EmbeddingBackend:
    cls = getattr(_dense_module(spec), class_name)
    try:
        return cls(**kwargs)
    except ImportError as exc:  # the module imported, but a runtime it needs (torch, onnxruntime) did not
        raise _needs_models_extra(spec, exc) from exc


def make_embedding_backend(
    spec: str | None = None, *, settings: Settings | None = None, **kwargs: Any
) -> EmbeddingBackend | None:
    """Select an embedding backend by name (case-insensitive).

    ``spec=None`` resolves through ``settings.embedding_spec`` (the service's selector:
    ``RAGSPINE_EMBEDDING``, default ``"auto"``, with ``RAGSPINE_EMBEDDING_BACKEND`` winning when set).
    Without ``settings`` it reads only what the spec documents for the library call,
    ``RAGSPINE_EMBEDDING_BACKEND``, and unset that is ``None`` (the published "None -> None": the library
    default stays pure BM25; ``"auto"`` is the selector that loads the packaged model).
    ``ragspine.settings.spec_env_default`` also gives that backend's OpenAI options. Options a backend
    needs from the settings come from ``settings`` (without it, the defaults).

    - ``"none"`` (or blank, ``"off"``) → ``None`` (pure BM25 + RRF)
    - ``"deterministic"`` → ``DeterministicEmbeddingBackend(**kwargs)``
    - ``"openai"`` → ``OpenAIEmbeddingBackend``; ``base_url``/``api_key``/``model``/``timeout_s`` from
      ``kwargs`` or the settings (``openai_base_url``, ``openai_api_key``, ``openai_embedding_model``,
      ``http_timeout_s``)
    - ``"onnx"``/``"fastembed"``/``"minilm"`` → the packaged all-MiniLM-L6-v2 on onnxruntime: on a CPU
      ``MiniLMInt8EmbeddingBackend(**kwargs)`` (integer matrix products, activations scaled per token; model
      id ``all-MiniLM-L6-v2-onnx-qint8-token``), on CUDA or with ``model_path``/``int8``/``tokenizer_path``
      in ``kwargs`` ``OnnxEmbeddingBackend(**kwargs)``; when the integer model cannot be built (no torch to
      export it once, an unwritable cache) the packaged graph as shipped, with a warning. Each model records
      its own id, so a library never mixes their vectors.
    - ``"minilm-int8"`` → ``MiniLMInt8EmbeddingBackend(**kwargs)`` on any device
    - ``"minilm-packaged"`` → ``OnnxEmbeddingBackend(**kwargs)``: the packaged graph as shipped (float
      matrix products, model id ``all-MiniLM-L6-v2-onnx-int8``), the default of earlier releases
    - ``"st"``/``"sentence-transformers"``/``"qwen3"`` → ``SentenceTransformerEmbeddingBackend(**kwargs)``
    - ``"e5"``/``"multilingual"``/``"multilingual-e5"`` → ``E5EmbeddingBackend(**kwargs)``
    - ``"auto"`` → what ``"onnx"`` gives when the models extra imports and the model loads, else ``None``

    For the packaged MiniLM, ``settings.device`` (``RAGSPINE_DEVICE``) is the session's device unless
    ``kwargs`` name one. Raises ``ValueError`` listing the choices for an unknown name, and ``ImportError``
    naming the extra when a model backend is asked for without it.
    """
    if spec is None:
        if settings is None:
            # The spec's documented environment default (see ragspine.settings.SPEC_ENV_DEFAULTS).
            settings = spec_env_default("ragspine.retrieval.vector.embedding_backends.make_embedding_backend")
            spec = settings.embedding_backend or OFF
        else:
            spec = settings.embedding_spec
    name = choice(spec)
    if name == OFF:
        return None
    if name == "deterministic":
        return DeterministicEmbeddingBackend(**kwargs)
    if name == "openai":
        settings = settings or Settings()
        base_url = kwargs.pop("base_url", None) or settings.openai_base_url
        if not base_url:
            raise ValueError(
                "embedding backend 'openai' needs a base URL: pass base_url= or settings with "
                "openai_base_url (RAGSPINE_OPENAI_BASE_URL)"
            )
        return OpenAIEmbeddingBackend(
            base_url,
            kwargs.pop("api_key", None) or settings.openai_api_key,
            kwargs.pop("model", None) or settings.openai_embedding_model,
            timeout_s=kwargs.pop("timeout_s", None) or settings.http_timeout_s,
            **kwargs,
        )
    # The service's device (RAGSPINE_DEVICE) decides which MiniLM graph runs, and where.
    device = "" if settings is None else settings.device.strip()
    if name in _PACKAGED_MINILM and "device" not in kwargs and device.lower() not in ("", "auto"):
        kwargs = {**kwargs, "device": device}
    if name in _PACKAGED_MINILM - {"auto"}:
        return _packaged_minilm(name, kwargs)
    if name in _MODEL_BACKENDS:
        return _model_backend(name, _MODEL_BACKENDS[name], kwargs)
    if name == "auto":
        try:
            return _packaged_minilm("onnx", kwargs)
        except Exception as exc:  # auto means "semantic when available": any load failure falls back to BM25
            log.info("embedding 'auto' falls back to pure BM25: %s", exc)
            return None
    raise ValueError(f"unknown embedding backend {spec!r}; choices: {', '.join(EMBEDDING_CHOICES)}")


def __getattr__(name: str) -> Any:
    """Lazy access to the model backends: importing this module never imports torch or onnxruntime."""
    if name in _LAZY_NAMES:
        return getattr(_dense_module(name), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
