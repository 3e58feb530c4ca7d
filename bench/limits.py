"""The three resource attacks on parsing and rendering, with and without the ingestion limits, same run.

Cases (generated here, each a few KB):
  text bomb    a PDF whose Flate streams expand to ~23 MB of text (parse_bytes)
  page bomb    40 empty letter pages rendered at 600 dpi (render_pdf_pages)
  huge page    one 200 x 200 inch page rendered at 100 dpi (render_pdf_pages)
Each case runs in a fresh process twice: "unbounded" (no limits: the behaviour before the limits existed)
and "limits" (``IngestLimits.from_settings(Settings())``: the service defaults, PDF work in a child
process capped at 2 GiB). Printed per row: outcome, seconds and the peak RSS of the calling process (the
capped parse/render child is forked by a forkserver, so its memory is not counted here; its address space
is bounded by RAGSPINE_PARSE_MEMORY_BYTES).

Usage: python bench/limits.py [--skip-unbounded-page-bomb] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

_CASE = r"""
import json, resource, sys, time
sys.path[:0] = [{root!r}, {services!r}]
from ragspine.ingest import parse_bytes
from ragspine.ingest.limits import IngestLimits
from ragspine.retrieval.visual.pages import render_pdf_pages
from ragspine.settings import Settings
from tests.ingest.bombs import blank_pages, text_bomb

case, bounded = sys.argv[1], sys.argv[2] == "limits"
limits = IngestLimits.from_settings(Settings()) if bounded else None
data = {{"text bomb": lambda: text_bomb(170, 1200), "page bomb": lambda: blank_pages(40),
        "huge page": lambda: blank_pages(1, 14400, 14400)}}[case]()
started = time.monotonic()
try:
    if case == "text bomb":
        outcome = f"accepted, {{len(parse_bytes(data, filename='bomb.pdf', limits=limits).text):,}} chars"
    else:
        dpi = 600 if case == "page bomb" else 100
        pages = render_pdf_pages(data, doc_id="d", dpi=dpi, limits=limits)
        width, height = pages[0].image.size
        outcome = f"rendered {{len(pages)}} pages, first {{width}}x{{height}}"
except Exception as exc:
    outcome = f"{{type(exc).__name__}}: {{str(exc)[:90]}}"
print(json.dumps({{"bytes": len(data), "outcome": outcome, "s": round(time.monotonic() - started, 2),
    "rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}}))
"""


def run(case: str, mode: str) -> dict[str, object]:
    code = _CASE.format(root=str(REPO_ROOT), services=str(REPO_ROOT / "services"))
    done = subprocess.run(
        [sys.executable, "-c", code, case, mode], capture_output=True, text=True, timeout=600, cwd=REPO_ROOT
    )
    if done.returncode != 0:
        return {"bytes": 0, "outcome": f"process died (rc {done.returncode})", "s": 0, "rss_mb": 0}
    row: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--skip-unbounded-page-bomb", action="store_true", help="it needs ~4 GB of memory")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for case in ("text bomb", "page bomb", "huge page"):
        for mode in ("unbounded", "limits"):
            if mode == "unbounded" and case == "page bomb" and args.skip_unbounded_page_bomb:
                continue
            rows.append({"case": case, "mode": mode, **run(case, mode)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        print(
            f"{row['case']:9s} {row['mode']:9s} {row['bytes']:>7} B  {row['s']:>6} s  "
            f"RSS {row['rss_mb']:>5} MB  {row['outcome']}"
        )


if __name__ == "__main__":
    main()
