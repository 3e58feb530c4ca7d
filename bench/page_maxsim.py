"""In-process page MaxSim: the float32 scoring matrix against the padded per-query path, same run.

    .venv/bin/python bench/page_maxsim.py [--pages 1000 --patches 256 --queries 20 --rounds 5 --k 10]

Pages: synthetic unit 128-d vectors, ``patches // 2 .. patches`` per page, in a float16 ``VisualPageStore``
(the default storage); queries of 20 unit token vectors seeded by their text. Two ``VisualPageIndex``
objects over the same store, both with the default float16 cache on the CPU:

- ``matrix``: the default scorer, i.e. the stacked float32 ``PageMatrix`` (one GEMM + segmented max,
  exact re-score of the pages that can reach the top k);
- ``padded``: the same ``maxsim_scores`` passed as an injected scorer, which takes the padded path
  (``pages x max_vectors x dim`` float16 cache converted to float32 on every query): the code every
  search ran before the matrix.

Rounds alternate the two; q/s is from process CPU time (the machine is shared), the median round ratio
is printed with the load average, and both must return the same leads (checked on every query).
"""

from __future__ import annotations

from _common import SeededQueries, pages_parser, random_pages, set_math_threads, timed

set_math_threads(1, override=False)

import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from ragspine.retrieval.visual.maxsim import maxsim_scores  # noqa: E402
from ragspine.retrieval.visual.page_index import VisualPageIndex  # noqa: E402
from ragspine.retrieval.visual.page_store import VisualPageStore  # noqa: E402


def padded_scorer(query: Any, pages: Any, mask: Any = None, **kwargs: Any) -> np.ndarray:
    """``maxsim_scores`` behind another name, so the index takes its padded (injected scorer) path."""
    return maxsim_scores(query, pages, mask, **kwargs)


def run(n_pages: int, patches: int, queries: int, rounds: int, k: int) -> dict[str, Any]:
    dim, tokens = 128, 20
    records, blocks = random_pages(n_pages, patches, dim)
    store = VisualPageStore(":memory:")
    store.put_pages(records, blocks, encoder=SeededQueries.name)
    encoder = SeededQueries(dim, tokens)
    matrix = VisualPageIndex(store, encoder, device="cpu")  # type: ignore[arg-type]
    padded = VisualPageIndex(store, encoder, device="cpu", scorer=padded_scorer)  # type: ignore[arg-type]
    texts = [f"query {i}" for i in range(queries)]
    t0 = time.process_time()
    matrix.search(texts[0], k=k)  # builds the matrix once, as a serving index holds it
    build_s = time.process_time() - t0
    padded.search(texts[0], k=k)
    view = matrix._matrix_snapshot()[1]
    m_qps, p_qps, ratios = [], [], []
    mismatches = 0
    for _ in range(rounds):
        got, m_s = timed(lambda: [matrix.search(t, k=k) for t in texts], time.process_time)
        want, p_s = timed(lambda: [padded.search(t, k=k) for t in texts], time.process_time)
        mismatches += sum(a != b for a, b in zip(got, want, strict=True))
        m_qps.append(queries / m_s)
        p_qps.append(queries / p_s)
        ratios.append(p_s / m_s)
    return {
        "pages": n_pages,
        "patches_per_page_max": patches,
        "rows": int(view.rows.shape[0]),
        "matrix_bytes_per_page": (view.rows.nbytes + view.starts.nbytes + view.counts.nbytes) / n_pages,
        "matrix_build_cpu_s": build_s,
        "matrix_qps": statistics.median(m_qps),
        "padded_qps": statistics.median(p_qps),
        "median_speedup": statistics.median(ratios),
        "queries_with_different_leads": mismatches,
        "queries_compared": rounds * queries,
        "load": os.getloadavg()[0],
    }


def main() -> int:
    parser = pages_parser(__doc__, pages=1000, patches=256)
    parser.add_argument("--queries", type=int, default=20)
    args = parser.parse_args()
    if min(args.pages, args.patches, args.queries, args.rounds, args.k) < 1:
        parser.error("every count must be >= 1")
    print(json.dumps(run(args.pages, args.patches, args.queries, args.rounds, args.k), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
