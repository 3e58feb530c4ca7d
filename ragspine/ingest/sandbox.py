"""Run a parse or render step in a child process with a capped address space.

``run_bounded(fn, *args, memory_bytes=..., timeout_s=...)`` forks ``fn`` from a forkserver (a clean,
single-threaded process started once, so forking is safe in a threaded gRPC server and costs
milliseconds), caps the child's address space with ``RLIMIT_AS`` and returns ``fn``'s result. A child that
runs out of memory (``MemoryError``, or pdfium failing to allocate and the child dying) raises
``LimitExceededError`` naming ``RAGSPINE_PARSE_MEMORY_BYTES``; one that runs past ``timeout_s`` is killed.
Other exceptions from ``fn`` (``ValueError`` for a corrupt file, a ``LimitExceededError``) come back as
they were raised. At most ``max_concurrent`` children run at once (callers wait for a slot): one document
can neither take the calling process down nor grow it past its budget.

``fn`` and its arguments must be picklable (module-level functions, bytes, plain data).
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from ragspine.ingest.limits import LimitExceededError

T = TypeVar("T")

# Modules the fork server imports once, so each bounded child starts with them loaded; modules whose
# functions run here add themselves with ``preload(__name__)``.
_PRELOAD = ["ragspine.ingest.pdf", "pypdfium2", "PIL.Image"]
_context_lock = threading.Lock()
_context: Any = None
_slots: threading.BoundedSemaphore | None = None
_slot_count = 0


def preload(module: str) -> None:
    """Have the fork server import ``module`` before the first bounded call (a no-op after it started)."""
    with _context_lock:
        if module not in _PRELOAD:
            _PRELOAD.append(module)


def _mp_context(max_concurrent: int) -> tuple[Any, threading.BoundedSemaphore]:
    global _context, _slots, _slot_count
    with _context_lock:
        if _context is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(_PRELOAD)
            _context = ctx
        if _slots is None or _slot_count != max_concurrent:
            _slots = threading.BoundedSemaphore(max_concurrent)
            _slot_count = max_concurrent
        return _context, _slots


def _child(conn: Connection, memory_bytes: int, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    try:
        result: tuple[str, Any] = ("ok", fn(*args, **kwargs))
    except MemoryError:
        result = ("memory", None)
    except BaseException as exc:  # every failure goes back to the parent
        result = ("error", exc)
    try:
        conn.send(result)
    except MemoryError:
        conn.send(("memory", None))
    except Exception as exc:  # an unpicklable exception: send its text instead
        conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))
    finally:
        conn.close()


def run_bounded(
    fn: Callable[..., T],
    *args: Any,
    memory_bytes: int,
    timeout_s: float = 300.0,
    max_concurrent: int = 2,
    label: str = "document",
    **kwargs: Any,
) -> T:
    """``fn(*args, **kwargs)`` in a child capped at ``memory_bytes`` of address space (see module doc)."""
    if memory_bytes <= 0:
        raise ValueError(f"memory_bytes must be positive, got {memory_bytes}")
    ctx, slots = _mp_context(max_concurrent)
    with slots:
        parent_end, child_end = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(child_end, memory_bytes, fn, args, kwargs), daemon=True)
        proc.start()
        child_end.close()
        try:
            if not parent_end.poll(timeout_s):
                proc.kill()
                raise LimitExceededError(
                    f"{label} took more than {timeout_s:g} s to parse or render; the step was stopped"
                )
            try:
                status, value = parent_end.recv()
            except EOFError:  # the child died without answering: killed by the allocator failing
                status, value = "memory", None
        finally:
            parent_end.close()
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
    if status == "ok":
        return value
    if status == "memory":
        raise LimitExceededError(
            f"{label} needs more than {memory_bytes} bytes of memory to parse or render (limit "
            "parse_memory_bytes, set RAGSPINE_PARSE_MEMORY_BYTES)"
        )
    raise value
