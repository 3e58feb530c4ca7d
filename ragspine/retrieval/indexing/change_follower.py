"""Keep a replica's in-memory indexes fresh between queries: follow the store's LISTEN/NOTIFY changes.

Every query already replays the store's change log first (``LibraryIndex.sync``), so results are never
stale; following changes in the background moves that work off the query path, so the first query after
another replica's write does not pay for replaying it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from ragspine.retrieval.indexing.library_index import LibraryIndex

_LOG = logging.getLogger(__name__)


class ChangeSource(Protocol):
    """What the follower needs from a store: ``PgChunkStore`` fits."""

    def change_seq(self) -> int: ...

    def wait_for_change(self, since_seq: int, timeout_s: float) -> bool: ...

    def wake_waiters(self) -> None: ...


class ChangeFollower:
    """A daemon thread that waits for changes to one store and syncs that store's built indexes.

    ``indexes`` is called after each change and returns the indexes to sync (those built so far).
    ``wait_s`` bounds one wait (seconds): after it the store's log is checked even if a notice was lost.
    When the database is unreachable the error is logged and retried every ``retry_s`` seconds; queries
    keep working on what they already hold and sync themselves once it is back.
    """

    def __init__(
        self,
        store: ChangeSource,
        indexes: Callable[[], Sequence[LibraryIndex]],
        *,
        name: str,
        wait_s: float = 5.0,
        retry_s: float = 1.0,
    ) -> None:
        if wait_s <= 0 or retry_s <= 0:
            raise ValueError(f"wait_s and retry_s must be > 0 seconds, got {wait_s!r} and {retry_s!r}")
        self._store = store
        self._indexes = indexes
        self._wait_s = wait_s
        self._retry_s = retry_s
        self._stop = threading.Event()
        self._synced = threading.Condition()
        self._synced_seq = -1
        self._thread = threading.Thread(target=self._run, name=f"follow-{name}", daemon=True)

    @property
    def synced_seq(self) -> int:
        """The store change seq every built index had applied at the follower's last sync (-1 before)."""
        with self._synced:
            return self._synced_seq

    def wait_synced(self, seq: int, timeout_s: float) -> bool:
        """Block until the follower has synced up to at least ``seq`` or ``timeout_s`` seconds pass."""
        with self._synced:
            return self._synced.wait_for(lambda: self._synced_seq >= seq, timeout=timeout_s)

    def start(self) -> ChangeFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and wait for it (at most about ``wait_s``); safe to call twice."""
        self._stop.set()
        if not self._thread.is_alive():
            return
        # Without the wake-up the thread would sit in its wait until the timeout; if the database is
        # already gone the timeout still ends the wait.
        with contextlib.suppress(Exception):
            self._store.wake_waiters()
        self._thread.join(self._wait_s + self._retry_s + 1.0)

    def _run(self) -> None:
        seen = -1
        while not self._stop.is_set():
            try:
                if seen < 0 or self._store.wait_for_change(seen, self._wait_s):
                    if self._stop.is_set():
                        break
                    # Read the seq before syncing: a change landing during the sync is picked up next turn.
                    seen = self._store.change_seq()
                    for index in self._indexes():
                        index.sync()
                    with self._synced:
                        self._synced_seq = seen
                        self._synced.notify_all()
            except Exception as exc:
                # Never let the thread die. The store's own errors show the DSN only redacted.
                _LOG.warning("following store changes failed; retrying", extra={"error": str(exc)})
                self._stop.wait(self._retry_s)
