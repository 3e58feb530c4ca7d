"""colpali_engine loading path of the visual encoders; runs in ``.venv-engine`` (``scripts/engine_env.sh``).

colpali-engine does not import beside the CPU torch of ``.venv`` (its torchvision needs a matching torch),
so every test here skips there with the reason, and ``scripts/test.sh`` runs this folder a second time in
``.venv-engine``. The CI rule of ``tests/conftest.py`` (any skip fails the run) covers that run too.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from engine_models import save_engine_model, save_lora_adapter

from ragspine.retrieval.visual.pages import PageRecord, render_pdf_pages


def _engine_import_error() -> str | None:
    try:
        import colpali_engine.models  # noqa: F401
    except Exception as exc:  # a torchvision built for another torch raises RuntimeError, not ImportError
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


ENGINE_ERROR = _engine_import_error()
SKIP_REASON = (
    f"colpali_engine does not import here ({ENGINE_ERROR}); "
    "run `bash scripts/engine_env.sh` and `.venv-engine/bin/python -m pytest tests/visual_engine`"
)


@pytest.fixture(scope="session")
def engine() -> ModuleType:
    """``colpali_engine.models``; every test of this folder depends on it and skips without it."""
    if ENGINE_ERROR is not None:
        pytest.skip(SKIP_REASON)
    import colpali_engine.models

    return colpali_engine.models


@pytest.fixture(autouse=True)
def _needs_engine(engine: ModuleType) -> None:
    """Makes tests that build no model skip too where colpali_engine is missing."""


@pytest.fixture(scope="session")
def engine_checkpoints(engine: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Saved tiny engine checkpoints: ``{family: (path, model, processor)}`` plus a ColQwen2 adapter.

    ``model`` is the in-memory model that was saved (so a comparison also proves the weights survived the
    round trip); ``processor`` is the one colpali_engine loads from the saved directory. That is not the
    processor that was saved: where torchvision imports, transformers picks the torchvision image
    processor over the PIL one, whose resizing differs by a few 1e-4 after the model.
    """
    root = tmp_path_factory.mktemp("engine")
    saved: dict[str, Any] = {}
    processors = {"colqwen2": engine.ColQwen2Processor, "colpali": engine.ColPaliProcessor}
    for family, seed in (("colqwen2", 3), ("colpali", 4)):
        path = root / f"tiny-{family}"
        model, _ = save_engine_model(family, path, seed=seed)
        saved[family] = (path, model, processors[family].from_pretrained(path))
    adapter = root / "tiny-colqwen2-lora"
    saved["colqwen2-adapter"] = (adapter, save_lora_adapter(saved["colqwen2"][0], adapter), None)
    return saved


# Real pages: a multi-page text document and a page of code and formulas, rendered small (the tiny
# ColQwen2 processor caps pages at 224 x 224 px anyway; ColPali resizes to 32 x 32).
SAMPLE_PDFS = (("docling/multi_page.pdf", 3), ("docling/code_and_formula.pdf", 2))


@pytest.fixture(scope="session")
def sample_pages(shared_data: Path) -> list[PageRecord]:
    """Five real PDF pages from ``pdf_samples``, rendered by ``render_pdf_pages`` at 40 dpi."""
    pages: list[PageRecord] = []
    for name, count in SAMPLE_PDFS:
        pages.extend(render_pdf_pages(shared_data / "pdf_samples" / name, dpi=40, max_pages=count))
    return pages
