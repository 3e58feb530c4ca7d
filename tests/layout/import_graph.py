"""The first-party import graph of the project, read from the source with ``ast`` (nothing is imported).

Every ``import`` and ``from ... import`` counts, wherever it sits: at module level, inside a function, a
``try`` or an ``if``. Imports under ``if TYPE_CHECKING:`` are kept apart (``typing_only``): they never run,
so they cannot form a runtime cycle, but the layering rules still apply to them.

An edge goes to the most specific first-party module named: ``from a.b import c`` points at ``a.b.c`` when
that is a module, else at ``a.b`` (the package that defines ``c``). Parent packages are not added as
implicit edges.

Lazy imports by name count too: a string literal that spells a first-party module exactly (not a
package, whose dotted name doubles as a logger name) is an import, as in
``importlib.import_module("ragspine.stores.pg_vector_store")`` or a table of factory modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Import:
    """One first-party import: ``source`` imports ``target`` at ``line``."""

    source: str
    target: str
    line: int
    module_level: bool  # False when the import sits inside a function or method
    typing_only: bool  # True under ``if TYPE_CHECKING:``


@dataclass
class ImportGraph:
    modules: dict[str, Path] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)

    def edges(self, *, runtime_only: bool = True) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {name: set() for name in self.modules}
        for imp in self.imports:
            if runtime_only and imp.typing_only:
                continue
            if imp.source != imp.target:
                out[imp.source].add(imp.target)
        return out


def module_files(roots: Mapping[Path, Iterable[str]]) -> dict[str, Path]:
    """``{dotted module name: file}`` for the packages named under each source root."""
    found: dict[str, Path] = {}
    for root, packages in roots.items():
        for package in packages:
            for path in sorted((root / package).rglob("*.py")):
                parts = list(path.relative_to(root).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Collector(ast.NodeVisitor):
    def __init__(self, name: str, is_package: bool, modules: Mapping[str, Path]) -> None:
        self.name = name
        self.package = name if is_package else name.rpartition(".")[0]
        self.modules = modules
        self.depth = 0  # function nesting
        self.typing = 0  # TYPE_CHECKING nesting
        self.found: list[Import] = []

    def _resolve(self, dotted: str) -> str | None:
        """The longest first-party module that ``dotted`` names or lies inside."""
        while dotted:
            if dotted in self.modules:
                return dotted
            dotted = dotted.rpartition(".")[0]
        return None

    def _add(self, dotted: str, line: int) -> None:
        target = self._resolve(dotted)
        if target is not None:
            self.found.append(Import(self.name, target, line, self.depth == 0, self.typing > 0))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            if node.level > 1:
                base = base[: len(base) - (node.level - 1)]
            module = ".".join([*base, node.module] if node.module else base)
        else:
            module = node.module or ""
        for alias in node.names:
            self._add(f"{module}.{alias.name}" if alias.name != "*" else module, node.lineno)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, str) and value in self.modules and self.modules[value].name != "__init__.py":
            self.found.append(Import(self.name, value, node.lineno, False, self.typing > 0))

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self.typing += 1
            for child in node.body:
                self.visit(child)
            self.typing -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function
    visit_Lambda = _function


def build_graph(modules: Mapping[str, Path], sources: Mapping[str, str] | None = None) -> ImportGraph:
    """Parse every module (or the given ``sources`` text for a name) and collect its first-party imports."""
    graph = ImportGraph(modules=dict(modules))
    for name, path in modules.items():
        text = sources[name] if sources is not None and name in sources else path.read_text("utf-8")
        collector = _Collector(name, path.name == "__init__.py", modules)
        collector.visit(ast.parse(text, filename=str(path)))
        graph.imports.extend(collector.found)
    return graph


def find_cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan), each sorted, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        # Iterative DFS: (node, iterator over its successors).
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)
