"""ColPali page retrieval at the spec's path: pages as images, a multi-vector embedder, MaxSim ranking.

``ColPaliVisualEmbedder`` constructs lazily (``__init__`` validates and records the model name; the model
loads at the first ``embed_*`` call) and runs on this package's visual encoders
(``ragspine.retrieval.visual.encoders.ColPaliEncoder``: transformers-native ``*-hf`` checkpoints, or
``colpali_engine`` ones where that package imports). No PyPI package ships ColPali weights: a model that
is not a local folder (given, or under ``cache_dir``) or in the local Hugging Face cache fails at first
use in one line. ``ColPaliVisualRetriever`` keeps a small in-memory page set: RESTRICTED pages are never
sent to the embedder and never returned, and results are leads (no text), cited by their page locator.
For a library's pages at scale (stored vectors, filters, the service) see ``ragspine.retrieval.visual``.
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ragspine.common.registry import Registry
from ragspine.models.packaged import cannot_load, local_model_path, resolve_model_dir
from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.rerank.colbert import maxsim
from ragspine.retrieval.rerank.published import ModelUnavailable, counted, fastembed_module, fastembed_options
from ragspine.retrieval.visual.maxsim import maxsim_scores
from ragspine.settings import choice, is_off, spec_env_default

__all__ = [
    "COLPALI_MODEL_ENV",
    "DEFAULT_COLPALI_BATCH_SIZE",
    "DEFAULT_COLPALI_MODEL",
    "RENDER_DPI",
    "VISUAL_EMBEDDERS",
    "VISUAL_EMBEDDER_ENV",
    "ColPaliVisualEmbedder",
    "ColPaliVisualRetriever",
    "VisualEmbedder",
    "VisualPage",
    "make_visual_embedder",
    "maxsim",
    "render_pdf_pages",
]

log = logging.getLogger(__name__)

DEFAULT_COLPALI_MODEL = "Qdrant/colpali-v1.3-fp16"
COLPALI_MODEL_ENV = "RAGSPINE_COLPALI_MODEL"
VISUAL_EMBEDDER_ENV = "RAGSPINE_VISUAL_EMBEDDER"
DEFAULT_COLPALI_BATCH_SIZE = 8
RENDER_DPI = 200


@dataclass(frozen=True)
class VisualPage:
    """One page image (PNG or JPEG bytes) of a document, with what cites it."""

    doc_id: str
    page_no: int
    image: bytes
    sensitivity: str = "INTERNAL"
    title: str | None = None
    source_locator: str | None = None

    @property
    def locator(self) -> str:
        """``source_locator`` when given, else ``"{doc_id}#page{page_no}"`` (the published form; the service's
        page leads are cited ``#page=N``, ``ragspine.retrieval.visual.pages.page_locator``)."""
        return self.source_locator or f"{self.doc_id}#page{self.page_no}"


@runtime_checkable
class VisualEmbedder(Protocol):
    """Multi-vector embedder of text queries and page images into one space."""

    def embed_query(self, query: str) -> list[list[float]]: ...

    def embed_images(self, images: Sequence[bytes]) -> list[list[list[float]]]: ...


def render_pdf_pages(path: str | Path) -> list[bytes]:
    """Every page of the PDF at ``path`` as PNG bytes at ``RENDER_DPI``; ``[]`` for a missing, corrupt,
    encrypted or empty PDF, as published (the reason is logged as a warning), so a caller builds no visual
    index for it."""
    from ragspine.retrieval.visual.pages import render_pdf_pages as render

    out: list[bytes] = []
    try:
        records = render(Path(path), dpi=RENDER_DPI)
    except ValueError as exc:
        log.warning("no pages rendered: %s", exc)
        return []
    for record in records:
        buffer = io.BytesIO()
        record.image.save(buffer, format="PNG")
        out.append(buffer.getvalue())
    return out


def _images(blobs: Sequence[bytes]) -> list[Any]:
    from PIL import Image

    images = []
    for i, blob in enumerate(blobs):
        if not isinstance(blob, bytes | bytearray) or not blob:
            raise ValueError(f"images[{i}] must be non-empty image bytes (PNG or JPEG)")
        try:
            with Image.open(io.BytesIO(blob)) as opened:
                images.append(opened.convert("RGB"))
        except Exception as exc:  # PIL raises several kinds for bytes that are no image
            raise ValueError(f"images[{i}] is not a readable image: {exc}") from None
    return images


class _FastembedColPali:
    """``fastembed``'s ColPali behind this package's encoder calls: ``embed_text`` for a query's token
    vectors, ``embed_image`` for each page's patch vectors."""

    def __init__(self, model: Any, batch_size: int) -> None:
        self.model = model
        self.batch_size = batch_size

    def embed_queries(self, queries: list[str]) -> list[np.ndarray]:
        (vectors,) = counted("embed_text", self.model.embed_text(queries[0]), 1)
        return [np.asarray(vectors, dtype=np.float32)]

    def embed_pages(self, images: list[Any]) -> list[np.ndarray]:
        made = self.model.embed_image(images, batch_size=self.batch_size)
        return [np.asarray(block, dtype=np.float32) for block in counted("embed_image", made, len(images))]


class ColPaliVisualEmbedder:
    """The published ColPali embedder: lazy; on this package's ColPali encoder, or on ``fastembed``."""

    weights_hint = (
        "no PyPI package ships ColPali weights: pass model_name= a local ColPali checkpoint folder "
        "(a transformers ColPaliForRetrieval *-hf checkpoint) or cache_dir= a folder holding it"
    )

    def __init__(
        self,
        model_name: str = DEFAULT_COLPALI_MODEL,
        *,
        cache_dir: str | None = None,
        batch_size: int = DEFAULT_COLPALI_BATCH_SIZE,
        threads: int | None = None,
    ) -> None:
        if not isinstance(model_name, str | Path) or not str(model_name).strip():
            raise ValueError(f"model_name must be a model id or folder, got {model_name!r}")
        for name, value in (("batch_size", batch_size), ("threads", threads)):
            if value is None and name == "threads":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.model_name = str(model_name)
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        self.batch_size = batch_size
        self.threads = threads
        self._encoder: Any = None
        self._lock = threading.Lock()

    def model_path(self) -> str:
        """Where the weights are looked for (``ragspine.models.packaged.local_model_path``)."""
        return local_model_path(self.model_name, self.cache_dir)

    def load(self) -> Any:
        """The encoder, loaded on the first call: this package's ColPali encoder for a local folder,
        else ``fastembed``'s ``LateInteractionMultimodalEmbedding`` when ``fastembed`` is installed, else
        this package's encoder on the local Hugging Face cache. ``ModelUnavailable`` (an ``ImportError``
        and a ``ValueError``) in one line when none of them can load it."""
        with self._lock:
            if self._encoder is None:
                self._encoder = self._load()
            return self._encoder

    def _load(self) -> Any:
        path = self.model_path()
        module = None if Path(path).is_dir() else fastembed_module()
        if module is not None:
            options = fastembed_options(self.cache_dir, self.threads)
            model = module.LateInteractionMultimodalEmbedding(self.model_name, **options)
            return _FastembedColPali(model, self.batch_size)
        from ragspine.retrieval.visual.encoders import ColPaliEncoder

        try:
            # A Hub id becomes a local folder first (or fails at once), so the encoder never waits on
            # the network for its config files.
            folder = resolve_model_dir(path, what="ColPali model")
            return ColPaliEncoder(str(folder), device="auto", batch_size=self.batch_size)
        except (ImportError, ValueError, OSError) as exc:
            hint = "install fastembed to load it through it (pip install 'ragspine[colpali]'), or "
            raise ModelUnavailable(
                str(cannot_load("ColPali model", self.model_name, exc, hint + self.weights_hint))
            ) from exc

    def embed_query(self, query: str) -> list[list[float]]:
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        vectors: list[list[float]] = np.asarray(self.load().embed_queries([query])[0]).tolist()
        return vectors

    def embed_images(self, images: Sequence[bytes]) -> list[list[list[float]]]:
        if not images:
            return []
        pictures = _images(images)
        blocks = self.load().embed_pages(pictures)
        if len(blocks) != len(pictures):
            raise ValueError(f"the ColPali model returned {len(blocks)} pages for {len(pictures)} images")
        return [np.asarray(block).tolist() for block in blocks]


class ColPaliVisualRetriever:
    """Pages ranked for a query by MaxSim over ``embedder``'s multi-vectors.

    ``pages`` are embedded at construction (RESTRICTED pages are dropped first: never embedded, never
    returned); ``add_pages`` adds more. ``retrieve`` answers one dict per page, best first (ties by
    locator): ``doc_id``, ``page_no``, ``source_locator``, ``title``, ``sensitivity``, ``score`` and
    ``scores`` (``visual``), with ``text`` empty (a page is a lead, not a passage).
    """

    def __init__(self, embedder: VisualEmbedder, pages: Sequence[VisualPage] | None = None) -> None:
        if not isinstance(embedder, VisualEmbedder):
            raise ValueError("embedder must have embed_query(str) and embed_images(list[bytes])")
        self.embedder = embedder
        self._pages: list[VisualPage] = []
        self._vectors: list[np.ndarray] = []
        self.add_pages(pages or ())

    def __len__(self) -> int:
        return len(self._pages)

    @property
    def pages(self) -> list[VisualPage]:
        """The pages held (the open ones given, in order; RESTRICTED pages are never among them)."""
        return list(self._pages)

    def add_pages(self, pages: Sequence[VisualPage]) -> int:
        """Embed and keep the open ``pages``; returns how many were added (RESTRICTED ones are not)."""
        open_pages = []
        for page in pages:
            if not isinstance(page, VisualPage):
                raise ValueError(f"pages must be VisualPage objects, got {type(page).__name__}")
            if not is_restricted(page.sensitivity):
                open_pages.append(page)
        if not open_pages:
            return 0
        blocks = self.embedder.embed_images([p.image for p in open_pages])
        if len(blocks) != len(open_pages):
            raise ValueError(f"embedder returned {len(blocks)} pages for {len(open_pages)} images")
        self._pages.extend(open_pages)
        self._vectors.extend(np.asarray(block, dtype=np.float32) for block in blocks)
        return len(open_pages)

    def retrieve(self, query: str, *, top_k: int = 10) -> list[dict[str, Any]]:
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
        if not self._pages:
            return []
        q = np.asarray(self.embedder.embed_query(query), dtype=np.float32)
        scores = maxsim_scores(q, self._vectors, device="cpu")
        order = sorted(range(len(self._pages)), key=lambda i: (-float(scores[i]), self._pages[i].locator))
        out = []
        for i in order[:top_k]:
            page = self._pages[i]
            score = float(scores[i])
            out.append(
                {
                    "chunk_id": page.locator,
                    "doc_id": page.doc_id,
                    "page_no": page.page_no,
                    "source_locator": page.locator,
                    "title": page.title,
                    "sensitivity": page.sensitivity,
                    "text": "",
                    "is_visual": True,
                    "score": score,
                    "scores": {"visual": score, "visual_maxsim": score},
                }
            )
        return out


VISUAL_EMBEDDERS = Registry("visual_embedder")
VISUAL_EMBEDDERS.register("colpali", ColPaliVisualEmbedder, aliases=("colqwen2", "visual"))


def make_visual_embedder(spec: str | None = None, **kwargs: Any) -> VisualEmbedder | None:
    """The embedder named by ``spec`` (``colpali``, or its aliases ``colqwen2`` / ``visual``, optionally
    ``family:model``; ``kwargs`` go to it), or None: for ``none``/``off``, and, with a logged warning, an
    unknown name (visual retrieval then stays off, as the published factory does).

    ``spec=None`` reads ``RAGSPINE_VISUAL_EMBEDDER`` (default ``none``) and, without ``model_name``,
    ``RAGSPINE_COLPALI_MODEL``, as the spec documents; ``settings=`` in ``kwargs`` supplies both instead
    (``settings.visual_embedder``, ``settings.visual_model``)."""
    settings = kwargs.pop("settings", None)
    if settings is None:
        env = spec_env_default("ragspine.retrieval.vision.colpali.make_visual_embedder")
        default_spec, default_model = env.visual_embedder, env.colpali_model
    else:
        default_spec, default_model = settings.visual_embedder, settings.visual_model
    raw = default_spec if spec is None else spec
    if is_off(raw):
        return None
    family, _, inline = str(raw).partition(":")
    name = choice(family)
    if name not in VISUAL_EMBEDDERS:
        log.warning("unknown visual embedder %r (choices: colpali, colqwen2, visual); visual stays off", raw)
        return None
    if "model_name" not in kwargs and (inline.strip() or default_model):
        kwargs["model_name"] = inline.strip() or default_model
    made: VisualEmbedder = VISUAL_EMBEDDERS.make(name, **kwargs)
    return made
