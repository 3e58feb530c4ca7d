"""The first-party import graph is acyclic and layered: the library never imports the service tier at
module level, and the front and the model worker never import each other's modules (they share model
specs through ``ragspine.settings`` and wire helpers through ``ragspine_services.common``).

Each rule is a checker over an ``ImportGraph``; the reverse proofs feed the same checkers graphs with a
deliberate violation, in synthetic packages and in the real tree with one module's source changed."""

from __future__ import annotations

from pathlib import Path

from tests.layout.import_graph import ImportGraph, build_graph, find_cycles, module_files

ROOT = Path(__file__).resolve().parents[2]
ROOTS = {ROOT: ["ragspine"], ROOT / "services": ["ragspine_services"]}
FRONT = "ragspine_services.front"
WORKER = "ragspine_services.worker"
# Front-tier composition the worker has no business with: it learns its models from Settings.model_specs.
FRONT_ONLY_LIBRARY = ("ragspine.retrieval.mode", "ragspine.retrieval.assembly")


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def cycles(graph: ImportGraph) -> list[list[str]]:
    """Import cycles among runtime imports (module- and function-level; TYPE_CHECKING imports never run)."""
    return find_cycles(graph.edges(runtime_only=True))


def layering_violations(graph: ImportGraph) -> list[str]:
    """Every import that breaks the layering, as ``source:line -> target (why)``."""
    problems: list[str] = []
    for imp in graph.imports:
        where = f"{imp.source}:{imp.line} -> {imp.target}"
        if _inside(imp.source, "ragspine") and _inside(imp.target, "ragspine_services") and imp.module_level:
            problems.append(f"{where} (library imports services at module level)")
        if _inside(imp.source, FRONT) and _inside(imp.target, WORKER):
            problems.append(f"{where} (front imports worker)")
        if _inside(imp.source, WORKER) and _inside(imp.target, FRONT):
            problems.append(f"{where} (worker imports front)")
        if _inside(imp.source, WORKER) and imp.target in FRONT_ONLY_LIBRARY:
            problems.append(f"{where} (the worker reads front composition; use Settings.model_specs)")
    return sorted(set(problems))


def _real_graph(**changed_sources: str) -> ImportGraph:
    modules = module_files(ROOTS)
    return build_graph(modules, changed_sources or None)


def _synthetic(tmp_path: Path, files: dict[str, str]) -> ImportGraph:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    packages = sorted({rel.split("/")[0] for rel in files})
    return build_graph(module_files({tmp_path: packages}))


# ---------------------------------------------------------------------------------------------- the tree


def test_the_graph_sees_the_whole_tree() -> None:
    graph = _real_graph()
    expected = {"ragspine.settings", "ragspine.stores.pg_vector_store", f"{FRONT}.server", f"{WORKER}.server"}
    assert expected <= set(graph.modules)
    # Lazy imports by name are edges: the vector-store factory imports the pgvector backend.
    edges = graph.edges()
    assert "ragspine.stores.pg_vector_store" in edges["ragspine.retrieval.vector.store"]
    assert "ragspine.models.colbert_weights" in edges["ragspine.models.onnx_rerank_export"]


def test_first_party_imports_are_acyclic() -> None:
    assert cycles(_real_graph()) == []


def test_layers_hold() -> None:
    assert layering_violations(_real_graph()) == []


# ------------------------------------------------------------------------------------- reverse proofs


def test_a_private_helper_imported_back_is_reported_as_a_cycle() -> None:
    """The cycle this layout removed: pgvector importing back from the module whose factory imports it."""
    path = ROOT / "ragspine" / "stores" / "pg_vector_store.py"
    broken = path.read_text("utf-8") + "\nfrom ragspine.retrieval.vector.store import _as_vector  # noqa\n"
    found = cycles(_real_graph(**{"ragspine.stores.pg_vector_store": broken}))
    assert ["ragspine.retrieval.vector.store", "ragspine.stores.pg_vector_store"] in found


def test_a_function_level_import_back_is_reported_as_a_cycle() -> None:
    path = ROOT / "ragspine" / "models" / "onnx_rerank_export.py"
    broken = path.read_text("utf-8") + "\n\ndef _f():\n    from ragspine.models.colbert import maxsim\n"
    found = cycles(_real_graph(**{"ragspine.models.onnx_rerank_export": broken}))
    assert any({"ragspine.models.colbert", "ragspine.models.onnx_rerank_export"} <= set(c) for c in found)


def test_front_importing_worker_internals_is_reported() -> None:
    path = ROOT / "services" / "ragspine_services" / "front" / "server.py"
    broken = path.read_text("utf-8") + "\nfrom ragspine_services.worker.batcher import approx_tokens\n"
    problems = layering_violations(_real_graph(**{f"{FRONT}.server": broken}))
    assert any("front imports worker" in p for p in problems), problems


def test_synthetic_cycles_of_every_kind_are_found(tmp_path: Path) -> None:
    graph = _synthetic(
        tmp_path,
        {
            "pkg/__init__.py": "",
            # module level, one way; relative import back inside a function
            "pkg/a.py": "import pkg.b\n",
            "pkg/b.py": "def f():\n    from . import a\n",
            # lazy import by name closes a three-module cycle
            "pkg/c.py": "from pkg.d import x\n",
            "pkg/d.py": "from pkg import e\nx = 1\n",
            "pkg/e.py": "import importlib\ndef g():\n    return importlib.import_module('pkg.c')\n",
            # a TYPE_CHECKING-only loop never runs: not a runtime cycle
            "pkg/f.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.g import G\n",
            "pkg/g.py": "from pkg.f import *\nclass G: ...\n",
            # a logger named like the package is not an import
            "pkg/h.py": "import logging\nlog = logging.getLogger('pkg')\nfrom pkg import a\n",
        },
    )
    assert cycles(graph) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d", "pkg.e"]]
    assert ["pkg.f", "pkg.g"] in find_cycles(graph.edges(runtime_only=False))


def test_synthetic_layer_breaks_are_found(tmp_path: Path) -> None:
    graph = _synthetic(
        tmp_path,
        {
            "ragspine/__init__.py": "",
            "ragspine/lib.py": "from ragspine_services.front import api\n",
            "ragspine/cli.py": "def main():\n    from ragspine_services.front import api\n",
            "ragspine/retrieval/__init__.py": "",
            "ragspine/retrieval/mode.py": "",
            "ragspine_services/__init__.py": "",
            "ragspine_services/front/__init__.py": "",
            "ragspine_services/front/api.py": "from ..worker.batcher import approx_tokens\n",
            "ragspine_services/worker/__init__.py": "",
            "ragspine_services/worker/batcher.py": "def approx_tokens(t): ...\n",
            "ragspine_services/worker/server.py": (
                "from typing import TYPE_CHECKING\n"
                "from ragspine.retrieval.mode import x\n"
                "if TYPE_CHECKING:\n    from ragspine_services.front.api import Api\n"
            ),
        },
    )
    problems = layering_violations(graph)
    assert problems == [
        "ragspine.lib:1 -> ragspine_services.front.api (library imports services at module level)",
        "ragspine_services.front.api:1 -> ragspine_services.worker.batcher (front imports worker)",
        "ragspine_services.worker.server:2 -> ragspine.retrieval.mode "
        "(the worker reads front composition; use Settings.model_specs)",
        "ragspine_services.worker.server:4 -> ragspine_services.front.api (worker imports front)",
    ]
