"""Giving memory back after large messages.

A 30 MB request passes through several buffers (gRPC's receive slices, the bytes handed to the
deserializer, the parsed message, the document text). All of it is freed when the call ends, but glibc's
allocator keeps freed memory in its arenas (one per thread that allocated, up to 8 per core) instead of
returning it to the system: 16 callers sending 30 MB messages left a front at +300-1,200 MB for good,
though nothing held it. Two measures, both no-ops where the C library is not glibc:

- :func:`tune_allocator` caps the number of arenas (``M_ARENA_MAX``), so freed memory is pooled in a few
  arenas instead of scattered over one per thread;
- :class:`HeapTrimmer` calls ``malloc_trim(0)`` shortly after a large message was handled (at most once a
  second), which hands the free pages of every arena back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
import time
from typing import Any

_LOG = logging.getLogger("ragspine_services.memory")

# A request or stream message at least this large marks the heap for trimming.
LARGE_MESSAGE_BYTES = 1024 * 1024
DEFAULT_ARENA_MAX = 2
_M_ARENA_MAX = -8  # mallopt parameter (malloc.h)


def _glibc() -> Any:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_LIBC = _glibc()


def tune_allocator(arena_max: int = DEFAULT_ARENA_MAX) -> bool:
    """Cap glibc's malloc arenas at ``arena_max`` for threads that allocate from now on; True when set.
    Call it at start, before the server's threads exist."""
    if _LIBC is None or arena_max < 1:
        return False
    return bool(_LIBC.mallopt(_M_ARENA_MAX, int(arena_max)))


def trim_heap() -> bool:
    """Return the free memory of every malloc arena to the system now; True when anything was returned."""
    if _LIBC is None:
        return False
    return bool(_LIBC.malloc_trim(0))


class HeapTrimmer:
    """Trims the heap ``settle_s`` after the last large message (and again ``trailing_s`` later when no
    other came), at most once per ``min_interval_s``.

    ``note(nbytes)`` is cheap (a comparison and an event) and is called for every request message.
    """

    def __init__(
        self,
        *,
        threshold_bytes: int = LARGE_MESSAGE_BYTES,
        settle_s: float = 0.2,
        min_interval_s: float = 1.0,
        trailing_s: float = 2.0,
    ) -> None:
        self.threshold_bytes = threshold_bytes
        self.settle_s = settle_s
        self.min_interval_s = min_interval_s
        self.trailing_s = trailing_s
        self.trims = 0
        self._due = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def note(self, nbytes: int) -> None:
        """A message of ``nbytes`` was received; a large one schedules a trim once it has been handled."""
        if nbytes < self.threshold_bytes or _LIBC is None:
            return
        self._due.set()
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="heap-trimmer", daemon=True)
                    self._thread.start()

    def _run(self) -> None:
        last = 0.0
        while True:
            self._due.wait()
            # Let the call that carried the message finish and free its buffers first; a burst of large
            # messages is trimmed once, after it.
            for _ in range(5):  # a steady flow of large messages is still trimmed every second or so
                if not self._due.is_set():
                    break
                self._due.clear()
                time.sleep(self.settle_s)
            wait = last + self.min_interval_s - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            trim_heap()
            self.trims += 1
            last = time.monotonic()
            # Once more a little later, unless more large messages came: gRPC releases some buffers of a
            # call only after its stream is done (and its connection's, when the client closes it).
            if not self._due.wait(self.trailing_s):
                trim_heap()
                self.trims += 1
                last = time.monotonic()


_TRIMMER = HeapTrimmer()


def heap_trimmer() -> HeapTrimmer:
    """The process's trimmer (malloc's arenas are per process)."""
    return _TRIMMER
