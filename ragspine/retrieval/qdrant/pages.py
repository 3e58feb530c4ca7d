"""Visual pages on Qdrant: one library's page multi-vectors in a collection scored by MaxSim.

The page store of record (``VisualPageStore`` / ``PgVisualPageStore``) keeps every page's vectors, text
and metadata; this index is what queries search. One collection per library (``{prefix}{library}__pages``)
holds one point per (page, document version): the named multivector ``colpali`` (``MultiVectorConfig``
with the ``MAX_SIM`` comparator and ``DOT`` distance, so a score is ``sum_t max_j <q_t, p_j>``, the same
raw dot products ``maxsim_scores`` computes) and a payload of the page's filter view (its metadata fields,
``doc_id`` and ``sensitivity``, exactly what ``MetadataFilter`` sees of a page in the in-process index)
plus ``rs_page``, ``rs_locator``, ``rs_encoder``, ``rs_version`` and ``rs_live``. RESTRICTED pages are
never upserted (the store refuses them as well).

Versions
--------
A document's version here is ``rs_version``: a digest of its stored pages (page numbers, image digests,
encoder, sensitivity, metadata, storage dtype and size). Point ids derive from (doc_id, page, version), so
two writers publishing the same version write the same points. Publishing a document runs the protocol
of the text collection (``retriever`` module doc) with the version as the write tag:

1. upsert the new version's points hidden (``rs_live=false``), skipping points already stored;
2. hide the document's points of every other version;
3. show the new version's points;
4. delete the document's points of every other version.

Every query asks for ``rs_live == true``, so it sees the old pages, part of them, none, part of the new
ones or the new ones: never pages of two versions of one document, and a withdrawn document (steps 2 and
4) never again. Writes to one library are expected from one writer at a time, as for the text collection.

Which documents are published: ``publish(doc_ids)`` after each write of the store (``LibraryPages`` calls
it once the store's transaction has committed) and ``reconcile()`` (every document of the store, and every
document the collection serves that the store no longer has) when a front opens the library and in
``ragspine reindex``.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from qdrant_client import models

from ragspine.retrieval.channels.qdrant_filters import translate
from ragspine.retrieval.constants import is_restricted
from ragspine.retrieval.filtering.metadata_filter import MetadataFilter
from ragspine.retrieval.qdrant.collection import CollectionCalls
from ragspine.retrieval.qdrant.connection import IndexUnavailableError, QdrantConfig, call_lock
from ragspine.retrieval.visual.page_index import PageLead
from ragspine.retrieval.visual.page_store import PageStore, StoredPage

PAGES_SCHEMA = 1
VECTOR = "colpali"
LIVE, VERSION, PAGE, LOCATOR, ENCODER = "rs_live", "rs_version", "rs_page", "rs_locator", "rs_encoder"
_RESERVED = (LIVE, VERSION, PAGE, LOCATOR, ENCODER)
_NAMESPACE = uuid.UUID("0b8e5a52-7c1d-4f0e-9a61-3d2c4b7e8f90")
_META_ID = 0
_UPSERT_BATCH = 64


def page_point_id(doc_id: str, page: int, version: str) -> str:
    """Deterministic point id of one page of one version of a document."""
    return str(uuid.uuid5(_NAMESPACE, f"{doc_id}\x00{page}\x00{version}"))


def filter_view(page: StoredPage) -> dict[str, Any]:
    """What a metadata filter sees of a page (as in the in-process index): its metadata, doc_id and
    sensitivity."""
    return {**dict(page.metadata), "doc_id": page.doc_id, "sensitivity": page.sensitivity}


def doc_version(pages: Sequence[StoredPage]) -> str:
    """Digest of a document's stored pages (listing fields only: computed without loading vectors)."""
    rows = sorted(
        (
            p.page,
            p.image_sha,
            p.encoder,
            p.sensitivity,
            json.dumps(dict(p.metadata), sort_keys=True),
            p.dtype,
            p.stored_bytes,
        )
        for p in pages
    )
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:32]


class QdrantPageIndex(CollectionCalls):
    """Page leads for one library from its Qdrant pages collection (see the module doc).

    ``library`` is the library id of the pages in ``store``; ``name`` (default ``library``) names the
    collection. ``encoder`` embeds queries (``embed_queries``) and names the embedding space: a collection
    holding pages of another encoder raises ``ValueError`` (re-index), as the in-process index does.
    Failures talking to Qdrant raise ``IndexUnavailableError`` (never an answer from another index).
    """

    _what = "Qdrant pages index"

    def __init__(
        self,
        *,
        client: Any,
        config: QdrantConfig,
        library: str,
        store: PageStore,
        encoder: Any,
        name: str | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.library = library  # the library id the store keys its pages by
        self.store = store
        self.encoder = encoder
        # ``name``: the library's name in collection names (letters, digits, '_', '-'); default ``library``.
        self.collection = f"{config.collection(name or library)}__pages"
        self.meta_collection = f"{self.collection}__meta"
        self._call_lock: Any = call_lock(client, config)
        self._write_lock = threading.Lock()
        self._ready_dim: int | None = None  # the collection exists for this width (checked or created)
        self._search_ready = False  # the collection exists and its meta matches: searches skip the check
        self.after_step: Callable[[str], None] | None = None  # observation hook between protocol steps

    # ------------------------------------------------------------------ qdrant calls
    def _step(self, name: str) -> None:
        if self.after_step is not None:
            self.after_step(name)

    def _exists(self) -> bool:
        return bool(self._call("open", self.client.collection_exists, self.collection))

    def _meta(self) -> dict[str, Any]:
        if not self._call("open", self.client.collection_exists, self.meta_collection):
            return {}
        found = self._call(
            "read meta", self.client.retrieve, self.meta_collection, [_META_ID], with_payload=True
        )
        return dict(found[0].payload or {}) if found else {}

    def _check_meta(self, meta: Mapping[str, Any], dim: int | None) -> None:
        want = {"schema": PAGES_SCHEMA, "encoder": self.encoder.name}
        have = {key: meta.get(key) for key in want}
        if have != want or (dim is not None and meta.get("dim") != dim):
            raise ValueError(
                f"Qdrant collection {self.collection!r} holds pages of {have} (dim {meta.get('dim')}), this "
                f"index needs {want} (dim {dim}): run `ragspine reindex --library {self.library} --recreate`"
            )

    def _ensure(self, dim: int) -> None:
        """Create the pages collection for ``dim``-wide vectors, or check an existing one matches."""
        if self._ready_dim == dim and self._exists():
            return
        if self._exists():
            self._check_meta(self._meta(), dim)
            self._ready_dim = dim
            return
        self._call(
            "create collection",
            self.client.create_collection,
            self.collection,
            vectors_config={
                VECTOR: models.VectorParams(
                    size=dim,
                    distance=models.Distance.DOT,
                    multivector_config=models.MultiVectorConfig(
                        comparator=models.MultiVectorComparator.MAX_SIM
                    ),
                )
            },
        )
        if self.config.is_remote:  # local mode scans every point anyway
            for key, schema in (
                ("doc_id", models.PayloadSchemaType.KEYWORD),
                (VERSION, models.PayloadSchemaType.KEYWORD),
                (LIVE, models.PayloadSchemaType.BOOL),
            ):
                self._call("index payload", self.client.create_payload_index, self.collection, key, schema)
        if not self._call("open", self.client.collection_exists, self.meta_collection):
            self._call(
                "create collection", self.client.create_collection, self.meta_collection, vectors_config={}
            )
        meta = {"schema": PAGES_SCHEMA, "encoder": self.encoder.name, "dim": dim}
        point = models.PointStruct(id=_META_ID, vector={}, payload=meta)
        self._call("write meta", self.client.upsert, self.meta_collection, [point], wait=True)
        self._ready_dim = dim

    # ------------------------------------------------------------------ writes
    def _stored(self, doc_ids: Sequence[str]) -> dict[str, list[StoredPage]]:
        """The store's pages of ``doc_ids`` (listing only, no vectors), RESTRICTED ones left out."""
        out: dict[str, list[StoredPage]] = {}
        for doc_id in doc_ids:
            numbers = self.store.page_digests(doc_id, library=self.library)
            if not numbers:
                continue
            keys = [(self.library, doc_id, n) for n in sorted(numbers)]
            pages = [
                p for p in self.store.load(keys=keys, with_vectors=False) if not is_restricted(p.sensitivity)
            ]
            if pages:
                out[doc_id] = pages
        foreign = sorted({p.encoder for pages in out.values() for p in pages} - {self.encoder.name})
        if foreign:
            raise ValueError(
                f"page store {self.store.db_path!r} holds pages embedded by {foreign}, not "
                f"{self.encoder.name!r}; re-index the library with one encoder"
            )
        return out

    def live_versions(self, doc_ids: Sequence[str] | None = None) -> dict[str, set[str]]:
        """The versions each document's live (query-visible) points carry; more than one is a mix."""
        if not self._exists():
            return {}
        must: list[Any] = [models.FieldCondition(key=LIVE, match=models.MatchValue(value=True))]
        if doc_ids is not None:
            must.append(models.FieldCondition(key="doc_id", match=models.MatchAny(any=list(doc_ids))))
        out: dict[str, set[str]] = {}
        for payload in self._scroll(models.Filter(must=must), ["doc_id", VERSION]):
            out.setdefault(str(payload["doc_id"]), set()).add(str(payload[VERSION]))
        return out

    def _scroll(self, flt: models.Filter | None, fields: list[str] | bool) -> Iterable[dict[str, Any]]:
        for points in self._scroll_pages(flt, fields):
            for p in points:
                yield dict(p.payload or {})

    def publish(self, doc_ids: Iterable[str]) -> int:
        """Make the collection serve exactly the store's current pages of ``doc_ids`` (a document the
        store no longer has is withdrawn). Returns how many documents changed in the collection."""
        wanted = sorted({d for d in doc_ids if isinstance(d, str) and d})
        if not wanted:
            return 0
        with self._write_lock:
            return self._publish(wanted)

    def reconcile(self) -> int:
        """``publish`` every document the store holds for this library or the collection serves."""
        stored = {p.doc_id for p in self.store.load(library=self.library, with_vectors=False)}
        served = set(self.live_versions())
        return self.publish(stored | served)

    def _publish(self, doc_ids: list[str]) -> int:
        stored = self._stored(doc_ids)
        target = {doc_id: doc_version(pages) for doc_id, pages in stored.items()}
        live = self.live_versions(doc_ids)
        changed = [d for d in doc_ids if live.get(d, set()) != ({target[d]} if d in target else set())]
        if not changed:
            return 0
        fresh = [d for d in changed if d in target]
        if fresh:
            self._upsert_hidden(fresh, stored, target)
        if not self._exists():  # nothing was ever published and nothing is to be
            return 0
        for doc_id in changed:
            version = target.get(doc_id, "")
            doc = models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id))
            this = models.FieldCondition(key=VERSION, match=models.MatchValue(value=version))
            other = models.Filter(must=[doc], must_not=[this])
            self._call(
                "hide", self.client.set_payload, self.collection, {LIVE: False}, points=other, wait=True
            )
            self._step("hid old")
            if version:
                show = models.Filter(must=[doc, this])
                self._call(
                    "show", self.client.set_payload, self.collection, {LIVE: True}, points=show, wait=True
                )
            self._step("showed new")
            self._call("delete", self.client.delete, self.collection, points_selector=other, wait=True)
            self._step("deleted old")
        return len(changed)

    def _upsert_hidden(
        self, doc_ids: list[str], stored: Mapping[str, list[StoredPage]], target: Mapping[str, str]
    ) -> None:
        self._ready_dim = None  # checked once per publish (another job may have dropped the collection)
        listing = [(doc_id, p) for doc_id in doc_ids for p in stored[doc_id]]
        ids = [page_point_id(d, p.page, target[d]) for d, p in listing]
        have: set[str] = set()
        dims = {p.vectors.shape[1] for _, p in listing if p.vectors.ndim == 2 and p.vectors.shape[1]}
        if len(dims) > 1:
            raise ValueError(
                f"stored pages have different vector widths {sorted(dims)}; one encoder per index"
            )
        if self._exists():
            found = self._call("retrieve", self.client.retrieve, self.collection, ids, with_payload=False)
            have = {str(p.id) for p in found}
        todo = [(d, p, pid) for (d, p), pid in zip(listing, ids, strict=True) if pid not in have]
        for lo in range(0, len(todo), _UPSERT_BATCH):
            batch = todo[lo : lo + _UPSERT_BATCH]
            keys = [(self.library, d, p.page) for d, p, _ in batch]
            vectors = {(p.doc_id, p.page): p for p in self.store.load(keys=keys)}
            points = []
            for doc_id, listed, pid in batch:
                page = vectors.get((doc_id, listed.page))
                if page is None or is_restricted(page.sensitivity):
                    continue  # withdrawn meanwhile: the next publish sees the store without it
                block = np.asarray(page.vectors, dtype=np.float32)
                if self._ready_dim != int(block.shape[1]):
                    self._ensure(int(block.shape[1]))
                payload = {
                    **filter_view(page),
                    PAGE: page.page,
                    LOCATOR: page.locator,
                    ENCODER: page.encoder,
                    VERSION: target[doc_id],
                    LIVE: False,
                }
                points.append(models.PointStruct(id=pid, vector={VECTOR: block.tolist()}, payload=payload))
            if points:
                self._call("upsert", self.client.upsert, self.collection, points, wait=True)
        self._step("upserted new")

    def drop(self) -> None:
        """Delete the pages collection and its meta collection."""
        self._ready_dim, self._search_ready = None, False
        for name in (self.collection, self.meta_collection):
            if self._call("open", self.client.collection_exists, name):
                self._call("drop", self.client.delete_collection, name)

    # ------------------------------------------------------------------ search
    def __len__(self) -> int:
        if not self._exists():
            return 0
        live = models.Filter(must=[models.FieldCondition(key=LIVE, match=models.MatchValue(value=True))])
        return int(
            self._call("count", self.client.count, self.collection, count_filter=live, exact=True).count
        )

    def search(self, query: str, *, k: int = 10, mfilter: MetadataFilter | None = None) -> list[PageLead]:
        """The ``k`` best live pages for ``query`` among those ``mfilter`` admits, best first (ties by
        locator), as text-free leads. Raises ``ValueError`` for a blank query or ``k < 1``,
        ``IndexUnavailableError`` when Qdrant fails."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
        if mfilter is not None and not isinstance(mfilter, MetadataFilter):
            raise ValueError("mfilter must be a MetadataFilter (see filtering.make_filter)")
        if not self._search_ready:  # checked once, then again only after a failed search
            if not self._exists():
                return []
            self._check_meta(self._meta(), None)
            self._search_ready = True
        query_vecs = np.asarray(self.encoder.embed_queries([query])[0], dtype=np.float32)
        if query_vecs.ndim != 2 or query_vecs.shape[0] == 0:
            raise ValueError(f"the encoder returned query vectors of shape {query_vecs.shape}")
        must: list[Any] = [models.FieldCondition(key=LIVE, match=models.MatchValue(value=True))]
        if mfilter is not None:
            must.append(translate(mfilter)[0])
        flt = models.Filter(must=must)
        limit = k + 8
        while True:
            try:
                response = self._call(
                    "pages search",
                    self.client.query_points,
                    self.collection,
                    query=query_vecs.tolist(),
                    using=VECTOR,
                    query_filter=flt,
                    limit=limit,
                    with_payload=True,
                )
            except (ValueError, IndexUnavailableError):
                self._search_ready = False
                if not self._exists():  # dropped meanwhile (re-index): no pages to serve yet
                    return []
                raise
            points = response.points
            hits: list[PageLead] = []
            for p in points:
                payload = dict(p.payload or {})
                view = {key: value for key, value in payload.items() if key not in _RESERVED}
                if mfilter is not None and not mfilter.matches(view):
                    continue  # the translated filter is a superset: the front narrows exactly
                hits.append(
                    PageLead(
                        str(payload["doc_id"]),
                        int(payload[PAGE]),
                        str(payload[LOCATOR]),
                        float(p.score),
                        self.library,
                    )
                )
            hits.sort(key=lambda lead: (-lead.score, lead.locator))
            if len(points) < limit:
                return hits[:k]
            if len(hits) >= k and hits[k - 1].score > float(points[-1].score):
                return hits[:k]
            limit *= 2
