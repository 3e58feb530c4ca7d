"""The vector spaces of one library: which model its stored vectors belong to, and keeping the in-memory
index on that model.

Vectors are data: every dense vector and sparse encoding is written to the store of record beside its
chunk version and loaded from it at start, so a restart recomputes none. The store records the model of
each vector space (``ledger``); this module verifies the process's model against it (switching the space,
and emptying it, when the model changed), installs stored vectors into the text index, keeps the ones a
search computed, and notices when another process switched the library to another model
(``model_conflicts``: that channel is then left out of queries and the drain until they agree again).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.indexing.codec import decode_dense_array, decode_sparse, encode_dense, encode_sparse
from ragspine.retrieval.indexing.ledger import DENSE, SPARSE, VectorLedger, model_id
from ragspine.retrieval.indexing.text_index import TextIndex

log = logging.getLogger(__name__)
CATCH_UP_EVERY_S = 5.0
# How often queries compare this process's models with the library's recorded vector spaces.
SPACE_CHECK_EVERY_S = 1.0

__all__ = ["CATCH_UP_EVERY_S", "SPACE_CHECK_EVERY_S", "VectorSpaces"]


def _dim_of(kind: str, component: object) -> int:
    dim = getattr(component, "dim", 0) if kind == DENSE else 0
    return dim if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 else 0


class VectorSpaces:
    """Keeps ``text``'s vectors on the models ``ledger`` records. ``hooks`` is the owner, read at call
    time for ``on_backlog`` (new work for a drainer) and ``on_conflict`` (``(kind, why)`` / ``(kind,
    None)`` as conflicts appear and go)."""

    def __init__(self, ledger: VectorLedger, text: TextIndex, hooks: Any) -> None:
        self.ledger = ledger
        self.text = text
        self.hooks = hooks
        self.models: dict[str, str] = {}  # kind -> the model id verified against the store
        self.epochs: dict[str, int] = {}  # kind -> the store's vector-space epoch when it was verified
        # kind -> why this process cannot serve or drain that kind: another process switched the library
        # to a different model. Read by the drainer (which reports it) and by queries (which skip it).
        self.model_conflicts: dict[str, str] = {}
        self.space_checked_at = -math.inf
        self.model_retry_at: dict[str, float] = {}
        self._model_lock = threading.Lock()  # serialises recording the models (never across a model call)
        self._identify_lock = threading.Lock()  # one thread asks a model for its id; none waits on it
        self._caught_up_at: dict[str, float] = {}
        self.embedded: dict[str, int] = {DENSE: 0, SPARSE: 0}  # passages embedded/encoded here, by kind

    def components(self) -> list[tuple[str, object]]:
        out: list[tuple[str, object]] = []
        if self.text.embedding_backend is not None:
            out.append((DENSE, self.text.embedding_backend))
        if self.text.sparse_encoder is not None:
            out.append((SPARSE, self.text.sparse_encoder))
        return out

    def _notify_backlog(self) -> None:
        hook = getattr(self.hooks, "on_backlog", None)
        if hook is not None:
            hook()

    # ------------------------------------------------------------------ the model of each kind
    def model(self, kind: str, component: object) -> str | None:
        """The model id of ``kind`` once verified against the store's vector space (switching the space
        when the model changed); None while the model cannot be identified (a worker is unreachable)."""
        known = self.models.get(kind)
        if known is not None:
            return known
        if time.monotonic() < self.model_retry_at.get(kind, 0.0):
            return None
        # Asking a remote model for its id is a worker call: it runs with no lock held, and only one
        # thread asks at a time; the others go on without waiting (as while the worker is unreachable).
        if not self._identify_lock.acquire(blocking=False):
            return None
        try:
            ident = model_id(component)
        except Exception as exc:
            # Asked again at most every few seconds, so an unreachable worker does not slow every query.
            self.model_retry_at[kind] = time.monotonic() + 5.0
            log.info("%s model not identified yet (%s); serving stored vectors as recorded", kind, exc)
            return None
        finally:
            self._identify_lock.release()
        with self._model_lock:
            return self._verify(kind, component, ident)

    def _verify(self, kind: str, component: object, ident: str) -> str | None:
        """Under ``_model_lock``: record ``ident`` as the model of ``kind`` (switching the vector space when
        it changed). No model call is made here."""
        known = self.models.get(kind)
        if known is not None:
            return known
        before = self.ledger.vector_space(kind)
        space = self.ledger.use_vector_model(kind, ident, _dim_of(kind, component))
        if before is not None and before.epoch != space.epoch:
            # What is in memory came from the old model: forget it, everything waits for the new one.
            self.text.clear_vectors(kind)
            self._notify_backlog()
        self.models[kind] = ident
        self.epochs[kind] = space.epoch
        return ident

    def verify_before_query(self) -> None:
        """Before a query ranks with stored vectors: identify every model not verified yet (stored vectors
        loaded before the model could be identified must not meet another model), and compare with the
        recorded spaces at most every ``SPACE_CHECK_EVERY_S``."""
        components = self.components()
        if len(self.models) < len(components):
            for kind, component in components:
                self.model(kind, component)
        if self.models and time.monotonic() - self.space_checked_at >= SPACE_CHECK_EVERY_S:
            # A model switched by another process shows here within a second even without a drainer.
            self.check()

    def check(self) -> dict[str, str]:
        """Compare the models this process verified with the library's recorded vector spaces (another
        process may have switched them since); returns ``model_conflicts``.

        A kind whose recorded model (or dimension) is no longer this process's model is a conflict: the
        drainer leaves its backlog alone and queries skip its channel, flagged degraded, until the library
        is back on this process's model. Back on it (or switched away and back: same model, new epoch),
        the in-memory vectors of that kind are replaced by the stored ones."""
        self.space_checked_at = time.monotonic()
        changes: list[tuple[str, str | None]] = []  # reported to ``on_conflict`` once no lock is held
        for kind, component in self.components():
            with self._model_lock:
                model = self.models.get(kind)
                if model is None:
                    continue
                space = self.ledger.vector_space(kind)
                if space is None:
                    continue
                dim = _dim_of(kind, component)
                same = space.model == model and (not dim or space.dim in (0, dim))
                was = self.model_conflicts.get(kind)
                if not same:
                    if was is None:
                        # The in-memory vectors stay, unused (an external vector store they mirror may
                        # hold the other process's vectors now: they are not deleted from here).
                        self.model_conflicts[kind] = (
                            f"the library's {kind} model was switched to {space.model!r}"
                            f"{f' (dimension {space.dim})' if space.dim else ''} by another process, but this"
                            f" process embeds with {model!r}{f' (dimension {dim})' if dim else ''}: it no"
                            f" longer drains this library's {kind} backlog and answers its queries without"
                            f" the {kind} channel; restart it configured with {space.model!r} (or switch the"
                            f" library back to {model!r})"
                        )
                        changes.append((kind, self.model_conflicts[kind]))
                    continue
                if was is None and self.epochs.get(kind) == space.epoch:
                    continue
                # Back on this process's model (or switched away and back): start from the store again.
                if self.model_conflicts.pop(kind, None) is not None:
                    changes.append((kind, None))
                self.epochs[kind] = space.epoch
                self.text.clear_vectors(kind)
            self.install(kind, self.ledger.load_vectors(kind, model))
            log.info("%s vectors: the library is on this process's model %s again; reloaded", kind, model)
        hook = getattr(self.hooks, "on_conflict", None)
        if hook is not None:
            for kind, why in changes:
                hook(kind, why)
        return self.model_conflicts

    # ------------------------------------------------------------------ vectors in and out of the store
    def install(self, kind: str, stored: dict[str, tuple[int, bytes]]) -> int:
        if kind == DENSE:
            return self.text.set_vectors(
                (cid, v, decode_dense_array(data)) for cid, (v, data) in stored.items()
            )
        return self.text.set_sparse((cid, v, decode_sparse(data)) for cid, (v, data) in stored.items())

    def load_persisted(self, chunk_ids: list[str] | None) -> int:
        """Install the stored vectors of ``chunk_ids`` (None = every indexed chunk); returns how many."""
        if chunk_ids == []:
            return 0
        installed = 0
        for kind, component in self.components():
            model = self.model(kind, component)
            if model is None:
                space = self.ledger.vector_space(kind)
                if space is None:
                    continue
                model = space.model
            installed += self.install(kind, self.ledger.load_vectors(kind, model, chunk_ids))
        return installed

    def keep(self, kind: str, computed: list[tuple[Chunk, object]]) -> None:
        """Vector sink of a lazy search: store what it computed, for the next start."""
        component = dict(self.components()).get(kind)
        model = None if component is None else self.model(kind, component)
        if model is None:
            return
        self.embedded[kind] += len(computed)
        self.ledger.put_vectors(kind, model, encoded(kind, computed), dim=dim_of_batch(kind, computed))

    def catch_up(self, kind: str, model: str) -> None:
        """Install vectors that are in the store but not in memory (written by another process); looked
        at every few seconds, since counting the backlog scans the library."""
        now = time.monotonic()
        if now - self._caught_up_at.get(kind, -math.inf) < CATCH_UP_EVERY_S:
            return
        self._caught_up_at[kind] = now
        missing = self.text.pending_ids(kind)
        if missing and len(missing) > self.ledger.count_pending_vectors(kind, model):
            self.install(kind, self.ledger.load_vectors(kind, model, missing))

    def pending(self) -> int | None:
        """Chunks still awaiting a vector, as the store counts them; None while a model is unidentified."""
        counts = [0]
        for kind, component in self.components():
            model = self.model(kind, component)
            if model is None:
                return None
            if kind in self.model_conflicts:
                # The backlog under the library's own model: what a process with that model must drain.
                space = self.ledger.vector_space(kind)
                model = model if space is None else space.model
            counts.append(self.ledger.count_pending_vectors(kind, model))
        return max(counts)

    def dense_space(self) -> tuple[str, int]:
        """(dense model id, dimension) the library's vectors are in; ("", 0) without dense vectors."""
        if self.text.embedding_backend is None:
            return "", 0
        space = self.ledger.vector_space(DENSE)
        return ("", 0) if space is None else (space.model, space.dim)


def encoded(kind: str, computed: Sequence[tuple[Chunk, object]]) -> list[tuple[str, int, bytes]]:
    """``(chunk_id, version, bytes)`` rows of computed vectors, as the ledger stores them."""
    encode: Callable[[Any], bytes] = encode_dense if kind == DENSE else encode_sparse
    return [(c.chunk_id, int(getattr(c, "version", 1)), encode(value)) for c, value in computed]


def dim_of_batch(kind: str, computed: Sequence[tuple[Chunk, object]]) -> int:
    if kind != DENSE or not computed:
        return 0
    return len(computed[0][1])  # type: ignore[arg-type]
