"""``RemoteVisualEncoder``: the ``VisualEncoder`` seam served by the model worker over gRPC.

Pages go out as PNG bytes and queries as text; multi-vectors come back. Only what the front decided to
embed is ever sent (the page index drops RESTRICTED pages before calling ``embed_pages``). Failures raise
``BackendUnavailableError``: a query then degrades to text-only, an ingest fails with UNAVAILABLE before
anything is stored.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragspine_services._gen import model_worker_pb2
from ragspine_services.common.deadline import remaining_s
from ragspine_services.common.errors import BackendUnavailableError
from ragspine_services.common.page_wire import encode_png, unpack_multivector
from ragspine_services.front.remote import WorkerClient

# Page embedding is slow on a CPU worker (seconds per page for a 2B model); ingestion may wait this long
# per request unless the caller's own deadline is shorter.
DEFAULT_PAGE_TIMEOUT_S = 600.0
# Leaves headroom under the 32 MiB message cap for framing.
_MAX_REQUEST_BYTES = 24 * 1024 * 1024
_MAX_PAGES_PER_REQUEST = 16


class RemoteVisualEncoder:
    """``VisualEncoder`` whose ``name`` and ``dim`` are the worker's published visual model (fetched once
    from Info, so a page store built with another model is refused). Thread-safe.

    ``page_timeout_s`` bounds each EmbedPages call (the caller's deadline, when shorter, wins); queries use
    the client's normal timeout. Raises ``BackendUnavailableError`` when the worker is unreachable, fails,
    or offers no visual model.
    """

    def __init__(self, client: WorkerClient, *, page_timeout_s: float = DEFAULT_PAGE_TIMEOUT_S) -> None:
        if page_timeout_s <= 0:
            raise ValueError(f"page_timeout_s must be positive, got {page_timeout_s}")
        self.client = client
        self.page_timeout_s = page_timeout_s
        self._lock = threading.Lock()
        self._identity: tuple[str, int] | None = None

    def _describe(self) -> tuple[str, int]:
        with self._lock:
            if self._identity is not None:
                return self._identity
        # Outside the lock: a hung worker must not make concurrent callers queue behind this call.
        info = self.client.info()
        if not info.visual_model:
            raise BackendUnavailableError(
                f"the model worker at {self.client.address} serves no visual model "
                "(set RAGSPINE_VISUAL_EMBEDDER on the worker)"
            )
        with self._lock:
            if self._identity is None:
                self._identity = (info.visual_model, int(info.visual_dim))
            return self._identity

    @property
    def name(self) -> str:
        return self._describe()[0]

    @property
    def dim(self) -> int:
        return self._describe()[1]

    def _check_model(self, model: str) -> None:
        if model != self.name:
            # A worker redeployed with another model would mix embedding spaces: refuse, never rank wrong.
            raise BackendUnavailableError(
                f"the model worker now serves visual model {model!r}, not {self.name!r}; restart the front"
            )

    def _page_batches(self, blobs: list[bytes]) -> list[list[bytes]]:
        batches: list[list[bytes]] = []
        current: list[bytes] = []
        used = 0
        for blob in blobs:
            if current and (len(current) >= _MAX_PAGES_PER_REQUEST or used + len(blob) > _MAX_REQUEST_BYTES):
                batches.append(current)
                current, used = [], 0
            current.append(blob)
            used += len(blob)
        if current:
            batches.append(current)
        return batches

    def _page_call(self, request: Any) -> Any:
        left = remaining_s()
        timeout = self.page_timeout_s if left is None else min(self.page_timeout_s, left)
        if timeout <= 0:
            raise BackendUnavailableError("no time left in the caller's deadline to embed pages")
        stub = self.client._stub
        metadata = self.client._metadata
        # Through the client's breaker and admission gate: a hung worker fails an ingest fast once open.
        return self.client.guarded(
            "EmbedPages", lambda t: stub.EmbedPages.future(request, timeout=t, metadata=metadata), timeout
        )

    def embed_pages(self, images: Sequence[Any]) -> list[np.ndarray]:
        """One float32 ``(n_patches, dim)`` array per PIL image, in order; ``ValueError`` for none."""
        if len(images) == 0:
            raise ValueError("embed_pages needs at least one image")
        blobs = [encode_png(image) for image in images]
        out: list[np.ndarray] = []
        for batch in self._page_batches(blobs):
            response = self._page_call(model_worker_pb2.EmbedPagesRequest(images=batch))
            self._check_model(response.model)
            out.extend(unpack_multivector(v) for v in response.vectors)
        if len(out) != len(images):
            raise BackendUnavailableError(f"model worker returned {len(out)} pages for {len(images)} images")
        return out

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One float32 ``(n_tokens, dim)`` array per query; ``ValueError`` for an empty list."""
        if len(texts) == 0:
            raise ValueError("embed_queries needs at least one query")
        request = model_worker_pb2.EmbedVisualQueryRequest(queries=list(texts))
        response = self.client._call("EmbedVisualQuery", request)
        self._check_model(response.model)
        vectors = [unpack_multivector(v) for v in response.vectors]
        if len(vectors) != len(texts):
            raise BackendUnavailableError(f"model worker returned {len(vectors)} queries for {len(texts)}")
        return vectors
