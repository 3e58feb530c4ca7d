"""What every index over one Qdrant collection shares (the text chunks of ``retriever``, the pages of
``pages``): calls serialised where the client needs it, failures raised as ``IndexUnavailableError`` naming
the collection, paged scrolls and ranked pages, the meta collection beside it, and the three last steps of
the write protocol both follow (hide the old points, show the new ones, delete the old ones).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from qdrant_client import models

from ragspine.retrieval.channels.qdrant_channels import LIVE
from ragspine.retrieval.qdrant.connection import IndexUnavailableError, QdrantConfig

__all__ = ["META_ID", "CollectionCalls"]

META_ID = 0  # the one point of a meta collection


class CollectionCalls:
    """Calls on ``collection`` (and its ``meta_collection``) through ``client``. ``after_step`` (None, or
    called with each protocol step's name once it is done) lets tests look between the steps."""

    client: Any
    config: QdrantConfig
    collection: str
    meta_collection: str
    _call_lock: Any
    after_step: Callable[[str], None] | None = None
    _what = "Qdrant index"  # how errors name this kind of collection

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            with self._call_lock:
                return fn(*args, **kwargs)
        except ValueError:
            raise
        except Exception as exc:
            raise IndexUnavailableError(
                f"{self._what} {self.collection!r} at {self.config.url} failed during {what}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def _scroll_pages(
        self, flt: Any = None, fields: list[str] | bool = True, *, page: int = 1024
    ) -> Iterator[list[Any]]:
        """The points matching ``flt`` (payload ``fields``, no vectors), one page of points at a time."""
        offset = None
        while True:
            points, offset = self._call(
                "scroll",
                self.client.scroll,
                self.collection,
                scroll_filter=flt,
                limit=page,
                offset=offset,
                with_payload=fields,
                with_vectors=False,
            )
            yield list(points)
            if offset is None:
                return

    def _query_page(self, what: str, **kwargs: Any) -> list[Any]:
        """The points (with payloads) of one ``query_points`` call on the collection, best first."""
        response = self._call(what, self.client.query_points, self.collection, with_payload=True, **kwargs)
        return list(response.points)

    def _index_payload(self, schemas: dict[str, Any]) -> None:
        """Payload indexes (field -> schema type) on a server; local mode scans every point anyway."""
        for key, schema in schemas.items() if self.config.is_remote else ():
            self._call("index payload", self.client.create_payload_index, self.collection, key, schema)

    def _count(self, flt: models.Filter | None = None) -> int:
        return int(
            self._call("count", self.client.count, self.collection, count_filter=flt, exact=True).count
        )

    # ------------------------------------------------------------------ the meta collection
    def _ensure_meta_collection(self) -> None:
        if not self._call("open", self.client.collection_exists, self.meta_collection):
            self._call(
                "create collection", self.client.create_collection, self.meta_collection, vectors_config={}
            )

    def _read_meta(self) -> dict[str, Any]:
        found = self._call(
            "read meta", self.client.retrieve, self.meta_collection, [META_ID], with_payload=True
        )
        return dict(found[0].payload or {}) if found else {}

    def _write_meta(self, payload: dict[str, Any]) -> None:
        point = models.PointStruct(id=META_ID, vector={}, payload=payload)
        self._call("write meta", self.client.upsert, self.meta_collection, [point], wait=True)

    # ------------------------------------------------------------------ the write protocol
    def _step(self, name: str) -> None:
        if self.after_step is not None:
            self.after_step(name)

    def _switch(self, old: list[Any] | models.Filter | None, new: list[Any] | models.Filter | None) -> None:
        """Steps 2-4 of a replacement, after the new points were upserted hidden: hide ``old``, show
        ``new``, delete ``old`` (each a list of point ids or a filter; None skips that call, never the
        step's report to ``after_step``)."""
        if old is not None:
            self._call("hide", self.client.set_payload, self.collection, {LIVE: False}, points=old, wait=True)
        self._step("hid old")
        if new is not None:
            self._call("show", self.client.set_payload, self.collection, {LIVE: True}, points=new, wait=True)
        self._step("showed new")
        if old is not None:
            selector = models.PointIdsList(points=list(old)) if isinstance(old, list) else old
            self._call("delete", self.client.delete, self.collection, points_selector=selector, wait=True)
        self._step("deleted old")
