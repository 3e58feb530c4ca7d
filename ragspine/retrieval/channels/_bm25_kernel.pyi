"""Types of the compiled BM25 query kernel (``_bm25_kernel.c``)."""

from collections.abc import Sequence

import numpy as np

def top(
    entries: list[tuple[np.ndarray, np.ndarray | None, np.ndarray | None, int, float]],
    counts: list[int],
    keys: np.ndarray,
    n_slots: int,
    k: int,
) -> tuple[list[str], list[float]]: ...

__all__: Sequence[str]
