"""The worker's models, loaded lazily through the library's factories on first use.

Each capability has a factory ``spec -> model`` (``make_embedding_backend``, ``build_reranker``, a sparse
encoder factory). Tests inject small fakes through :class:`ModelFactories`; production uses the defaults,
which import the model runtimes only when a request first needs them.
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragspine.settings import Settings, is_off
from ragspine_services.common.errors import BackendUnavailableError, NotFoundError


def _lazy_factory(module: str, name: str) -> Callable[..., Any]:
    def load(spec: str | None, **options: Any) -> Any:
        try:
            factory = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            raise BackendUnavailableError(
                f"{module}.{name} is not available in this install: {exc}"
            ) from None
        return factory(spec, **options)

    return load


_EMBEDDING = _lazy_factory("ragspine.retrieval.vector.embedding_backends", "make_embedding_backend")
_RERANKER = _lazy_factory("ragspine.retrieval.rerank.cross_encoder", "build_reranker")
_SPLADE = _lazy_factory("ragspine.models.sparse", "SpladeEncoder")
# "colqwen2" / "colpali", optionally "family:model id or path" (see make_visual_encoder).
_VISUAL = _lazy_factory("ragspine.retrieval.visual.factory", "make_visual_encoder")


def _sparse(spec: str, **options: Any) -> Any:
    # "splade" names the packaged default model; anything else is a model id or local path.
    return _SPLADE(None, **options) if spec == "splade" else _SPLADE(spec, **options)


@dataclass(frozen=True)
class ModelFactories:
    """How to build each model from its spec string (empty spec = capability not offered)."""

    embedding: Callable[[str], Any] = _EMBEDDING
    reranker: Callable[[str], Any] = _RERANKER
    sparse: Callable[[str], Any] = _sparse
    visual: Callable[[str], Any] = _VISUAL

    @classmethod
    def for_settings(cls, settings: Settings) -> ModelFactories:
        """The library's factories, each given ``settings`` (device, model ids, endpoints), so nothing a
        worker loads reads the environment behind them."""
        return cls(
            embedding=functools.partial(_EMBEDDING, settings=settings),
            reranker=functools.partial(_RERANKER, settings=settings),
            sparse=functools.partial(_sparse, device=settings.device or "auto"),
            visual=functools.partial(_VISUAL, settings=settings),
        )


class ModelRegistry:
    """Loads each (capability, spec) once, thread-safely, and remembers what is loaded."""

    def __init__(
        self,
        *,
        embedding_spec: str = "",
        sparse_spec: str = "",
        reranker_spec: str = "",
        visual_spec: str = "",
        factories: ModelFactories | None = None,
    ) -> None:
        self.embedding_spec = embedding_spec
        self.sparse_spec = sparse_spec
        self.reranker_spec = reranker_spec
        self.visual_spec = visual_spec
        self._factories = factories or ModelFactories()
        self._loaded: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def loaded_models(self) -> list[tuple[str, Any]]:
        """``(kind, model)`` of every model loaded so far, sorted by kind then spec."""
        with self._lock:
            return [(kind, self._loaded[(kind, spec)]) for kind, spec in sorted(self._loaded)]

    @property
    def loaded(self) -> list[str]:
        """``"kind:spec"`` of every model loaded so far, sorted."""
        with self._lock:
            return sorted(f"{kind}:{spec}" for kind, spec in self._loaded)

    def _get(self, kind: str, spec: str, factory: Callable[[str], Any]) -> Any:
        if is_off(spec):
            raise NotFoundError(
                f"this worker serves no {kind} model (configure one with RAGSPINE_* settings)"
            )
        with self._lock:
            model = self._loaded.get((kind, spec))
            if model is None:
                model = factory(spec)
                if model is None:
                    raise NotFoundError(f"{kind} spec {spec!r} selects no model")
                self._loaded[(kind, spec)] = model
            return model

    def embedding(self) -> Any:
        """The embedding backend (``embed_texts`` and optionally ``embed_queries``)."""
        return self._get("embedding", self.embedding_spec, self._factories.embedding)

    def sparse(self) -> Any:
        """The sparse encoder (``encode(texts) -> list[dict[str, float]]``)."""
        return self._get("sparse", self.sparse_spec, self._factories.sparse)

    def reranker(self, spec: str = "") -> Any:
        """The reranker for ``spec`` (default: the configured one)."""
        return self._get("reranker", spec or self.reranker_spec, self._factories.reranker)

    def visual(self) -> Any:
        """The page/query multi-vector encoder (``VisualEncoder``: ``name``, ``dim``, ``embed_pages``,
        ``embed_queries``)."""
        return self._get("visual", self.visual_spec, self._factories.visual)

    @property
    def offers_visual(self) -> bool:
        """True when a visual embedder is configured (it may not be loaded yet)."""
        return not is_off(self.visual_spec)

    def warm_up(self) -> None:
        """Load every configured model now (used before reporting SERVING)."""
        for spec, load in ((self.embedding_spec, self.embedding), (self.sparse_spec, self.sparse)):
            if not is_off(spec):
                load()
        if not is_off(self.reranker_spec):
            self.reranker()
        if self.offers_visual:
            self.visual()
