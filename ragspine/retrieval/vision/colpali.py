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
from ragspine.retrieval.visual.maxsim import maxsim_scores
from ragspine.retrieval.visual.pages import page_locator
from ragspine.settings import choice, is_off

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
        """``source_locator`` when given, else ``"{doc_id}#page={page_no}"``."""
        return self.source_locator or page_locator(self.doc_id, self.page_no)


@runtime_checkable
class VisualEmbedder(Protocol):
    """Multi-vector embedder of text queries and page images into one space."""

    def embed_query(self, query: str) -> list[list[float]]: ...

    def embed_images(self, images: Sequence[bytes]) -> list[list[list[float]]]: ...


def render_pdf_pages(path: str | Path) -> list[bytes]:
    """Every page of the PDF at ``path`` as PNG bytes at ``RENDER_DPI``; ``ValueError`` for a missing,
    corrupt, encrypted or empty PDF."""
    from ragspine.retrieval.visual.pages import render_pdf_pages as render

    out: list[bytes] = []
    for record in render(Path(path), dpi=RENDER_DPI):
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


class ColPaliVisualEmbedder:
    """The published ColPali embedder: lazy, on this package's ColPali encoder."""

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
        """The encoder, loaded on the first call (``ValueError`` in one line when it cannot be)."""
        with self._lock:
            if self._encoder is None:
                from ragspine.retrieval.visual.encoders import ColPaliEncoder

                try:
                    # A Hub id becomes a local folder first (or fails at once), so the encoder never
                    # waits on the network for its config files.
                    folder = resolve_model_dir(self.model_path(), what="ColPali model")
                    self._encoder = ColPaliEncoder(str(folder), device="auto", batch_size=self.batch_size)
                except (ValueError, OSError) as exc:
                    raise cannot_load("ColPali model", self.model_name, exc, self.weights_hint) from exc
            return self._encoder

    def embed_query(self, query: str) -> list[list[float]]:
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        vectors: list[list[float]] = self.load().embed_queries([query])[0].tolist()
        return vectors

    def embed_images(self, images: Sequence[bytes]) -> list[list[list[float]]]:
        if not images:
            return []
        return [block.tolist() for block in self.load().embed_pages(_images(images))]


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
                    "score": score,
                    "scores": {"visual": score},
                }
            )
        return out


VISUAL_EMBEDDERS = Registry("visual_embedder")
VISUAL_EMBEDDERS.register("colpali", ColPaliVisualEmbedder)


def make_visual_embedder(spec: str | None = None, **kwargs: Any) -> VisualEmbedder | None:
    """The embedder named by ``spec`` (``colpali``; ``kwargs`` go to it), or None: for ``spec`` None,
    ``none``/``off``, and, with a logged warning, an unknown name (visual retrieval then stays off, as the
    published factory does). ``settings=`` in ``kwargs`` supplies the name when ``spec`` is None
    (``settings.visual_embedder``) and the model (``settings.visual_model``) when none is given."""
    settings = kwargs.pop("settings", None)
    if spec is None and settings is not None:
        spec = settings.visual_embedder
        if settings.visual_model and "model_name" not in kwargs:
            kwargs["model_name"] = settings.visual_model
    if spec is None or is_off(spec):
        return None
    name = choice(spec)
    if name not in VISUAL_EMBEDDERS:
        log.warning("unknown visual embedder %r (choices: %s); visual retrieval stays off", spec, "colpali")
        return None
    made: VisualEmbedder = VISUAL_EMBEDDERS.make(name, **kwargs)
    return made
