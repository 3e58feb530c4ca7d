"""Only the entry points read the environment: an ``ast`` scan of the library, the services and the client.

- ``os.environ`` / ``os.getenv`` (however imported) and ``Settings.from_env`` appear only in
  ``ragspine/settings.py``, ``ragspine/cli/`` and the server entry points (``serve_front``, ``serve_worker``).
  Everything else receives its settings as arguments.
- The spec-documented environment defaults go through ``ragspine.settings.spec_env_default``, each called
  from exactly the function its ``SPEC_ENV_DEFAULTS`` entry names, and from nowhere else.
- A few modules read process variables that are no settings (a cache folder, the Hugging Face token, the
  environment handed on to a child process); they are listed with what they read, never a ``RAGSPINE_*``.

Reverse proofs feed the same scan sources that read the environment, in synthetic snippets and in the real
tree with one module's source changed back to a read this replaced.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from ragspine.settings import PREFIX, SPEC_ENV_DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
SCANNED = (
    ROOT / "ragspine",
    ROOT / "services" / "ragspine_services",
    ROOT / "clients" / "python" / "ragspine_client",
)

# Where reading the environment is the job: the settings module, the published ``ServiceConfig.from_env``,
# the console script, the servers' entry points (services/ragspine_services/local.py is none: it is handed
# Settings).
READERS = ("ragspine/settings.py", "ragspine/service/config.py", "ragspine/cli/")
SERVER_ENTRY_POINTS = (
    "services/ragspine_services/front/server.py",
    "services/ragspine_services/worker/server.py",
)

# Process variables that are no settings, by module: (variables read, "*" = the environment handed on to a
# child process), and why.
PROCESS_VARIABLES: dict[str, tuple[frozenset[str], str]] = {
    "ragspine/models/packaged.py": (frozenset({"XDG_CACHE_HOME"}), "the XDG cache folder of derived models"),
    "ragspine/models/fetch.py": (frozenset({"HF_HOME", "HF_TOKEN"}), "the Hugging Face cache and token"),
    "ragspine/models/onnx_export.py": (frozenset({"*"}), "the environment of the export child process"),
    "services/ragspine_services/gen_protos.py": (frozenset({"*"}), "the environment of protoc (dev tool)"),
}

_ENV_ATTRIBUTES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


@dataclass(frozen=True)
class Read:
    line: int
    what: str  # "environ" or "from_env"
    variable: str  # the variable read, "*" when not one literal name


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _variable_of(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    """The variable ``node`` (``os.environ``, ``os.getenv``, ...) reads when it is one literal name."""
    parent = parents.get(node)
    if isinstance(parent, ast.Call) and parent.func is node:  # getenv("X")
        return _literal(parent.args[0] if parent.args else None) or "*"
    if isinstance(parent, ast.Attribute) and parent.attr == "get":  # environ.get("X")
        call = parents.get(parent)
        if isinstance(call, ast.Call) and call.func is parent and call.args:
            return _literal(call.args[0]) or "*"
    if isinstance(parent, ast.Subscript) and parent.value is node:  # environ["X"]
        return _literal(parent.slice) or "*"
    if isinstance(parent, ast.Compare) and node in parent.comparators:  # "X" in environ
        return _literal(parent.left) or "*"
    return "*"


def environment_reads(source: str) -> list[Read]:
    """Every place in ``source`` that touches the process environment or calls ``<x>.from_env``."""
    tree = ast.parse(source)
    parents = _parents(tree)
    os_modules: set[str] = set()
    from_os: set[str] = set()  # local names of os.environ, os.getenv, ...
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            os_modules |= {a.asname or a.name for a in node.names if a.name == "os"}
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            from_os |= {a.asname or a.name for a in node.names if a.name in _ENV_ATTRIBUTES}
    reads: list[Read] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "from_env":
            reads.append(Read(node.lineno, "from_env", "*"))
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in _ENV_ATTRIBUTES
            and isinstance(node.value, ast.Name)
            and node.value.id in os_modules
        ) or (isinstance(node, ast.Name) and node.id in from_os and isinstance(node.ctx, ast.Load)):
            reads.append(Read(node.lineno, "environ", _variable_of(node, parents)))
    return sorted(reads, key=lambda r: (r.line, r.what))


def _may_read(rel: str, read: Read) -> bool:
    if rel.startswith(READERS) or rel in SERVER_ENTRY_POINTS:
        return True
    allowed, _ = PROCESS_VARIABLES.get(rel, (frozenset(), ""))
    return read.what == "environ" and read.variable in allowed


def _tree_sources(**changed: str) -> dict[str, str]:
    sources = {}
    for folder in SCANNED:
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "/_gen/" not in rel:
                sources[rel] = path.read_text("utf-8")
    for rel, text in changed.items():
        assert rel in sources, rel
        sources[rel] = text
    return sources


def offenders(sources: dict[str, str]) -> list[str]:
    """``path:line what variable`` for every environment read outside the places allowed above."""
    found = []
    for rel, text in sources.items():
        found += [
            f"{rel}:{r.line} {r.what} {r.variable}" for r in environment_reads(text) if not _may_read(rel, r)
        ]
    return found


def _module_name(rel: str) -> str:
    dotted = rel.removesuffix(".py").removesuffix("/__init__")
    for root in ("services/", "clients/python/"):
        dotted = dotted.removeprefix(root)
    return dotted.replace("/", ".")


def spec_default_calls(module: str, source: str) -> list[tuple[str, str]]:
    """``(key passed, "module.function" of the caller)`` for every ``spec_env_default`` call in ``source``
    (the key ``"<not a literal>"`` when it is not one string literal)."""
    calls: list[tuple[str, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else ""
            )
            if name == "spec_env_default":
                key = _literal(node.args[0] if node.args else None) or "<not a literal>"
                calls.append((key, f"{module}.{function}"))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "<module>")
    return calls


def spec_default_problems(sources: dict[str, str]) -> list[str]:
    """What breaks the rule that each SPEC_ENV_DEFAULTS entry is read from its own function, and only
    there."""
    problems = []
    called: dict[str, list[str]] = {}
    for rel, text in sources.items():
        if rel == "ragspine/settings.py":
            continue
        for key, caller in spec_default_calls(_module_name(rel), text):
            called.setdefault(key, []).append(caller)
            if key not in SPEC_ENV_DEFAULTS:
                problems.append(f"{caller} reads {key!r}, which SPEC_ENV_DEFAULTS does not list")
            elif key != caller:
                problems.append(f"{caller} reads the default of {key}")
    problems += [f"nothing reads the listed default {key}" for key in SPEC_ENV_DEFAULTS if key not in called]
    return sorted(problems)


# ---------------------------------------------------------------------------------------------- the tree


def test_only_the_entry_points_read_the_environment() -> None:
    sources = _tree_sources()
    assert "ragspine/common/company_profile.py" in sources and len(sources) > 100
    # The scan sees the readers it lets through (it is not blind).
    assert any(r.what == "from_env" for r in environment_reads(sources["ragspine/cli/serve_cmd.py"]))
    assert offenders(sources) == [], (
        "take the value from the Settings passed in (or, for a spec-documented default, spec_env_default)"
    )


def test_the_domain_profile_module_reads_no_environment() -> None:
    text = (ROOT / "ragspine/common/company_profile.py").read_text("utf-8")
    assert environment_reads(text) == []
    assert spec_default_calls("ragspine.common.company_profile", text) == [
        (
            "ragspine.common.company_profile.load_company_profile",
            "ragspine.common.company_profile.load_company_profile",
        )
    ]


def test_spec_documented_defaults_are_read_where_listed_and_nowhere_else() -> None:
    assert spec_default_problems(_tree_sources()) == []
    assert set(SPEC_ENV_DEFAULTS) == {
        "ragspine.retrieval.vector.embedding_backends.make_embedding_backend",
        "ragspine.retrieval.rerank.cross_encoder.make_reranker",
        "ragspine.retrieval.vision.colpali.make_visual_embedder",
        "ragspine.common.company_profile.load_company_profile",
    }


def test_the_process_variables_listed_are_no_settings() -> None:
    for rel, (names, why) in PROCESS_VARIABLES.items():
        assert (ROOT / rel).is_file() and why, rel
        assert not any(name.startswith(PREFIX) for name in names), rel


# ---------------------------------------------------------------------------------------- reverse proofs


def test_reverse_proof_the_scan_finds_every_spelling_of_an_environment_read() -> None:
    def variables(source: str) -> list[tuple[str, str]]:
        return [(r.what, r.variable) for r in environment_reads(source)]

    assert variables('import os\nmode = os.environ.get("RAGSPINE_RETRIEVAL_MODE", "auto")\n') == [
        ("environ", "RAGSPINE_RETRIEVAL_MODE")
    ]
    assert variables('import os as o\nx = o.environ["RAGSPINE_X"]\n') == [("environ", "RAGSPINE_X")]
    assert variables('from os import getenv\nx = getenv("RAGSPINE_X")\n') == [("environ", "RAGSPINE_X")]
    assert variables('from os import environ as env\nok = "A" in env\n') == [("environ", "A")]
    assert variables("import os\nenv = dict(os.environ)\n") == [("environ", "*")]
    assert variables("from ragspine.settings import Settings\ns = Settings.from_env()\n") == [
        ("from_env", "*")
    ]
    assert variables("from ragspine.settings import Settings as S\nmode = S.from_env().retrieval_mode\n") == [
        ("from_env", "*")
    ]
    # Names that merely look alike are not reads.
    assert variables('environ = {}\nx = environ.get("A")\nimport os\np = os.path.join("a")\n') == []


def test_reverse_proof_a_library_module_reading_the_environment_is_caught() -> None:
    mode = (ROOT / "ragspine/retrieval/mode.py").read_text("utf-8")
    assert "(settings or Settings())" in mode
    fallback = mode.replace("(settings or Settings())", "(settings or Settings.from_env())")
    assert offenders(_tree_sources(**{"ragspine/retrieval/mode.py": fallback})) == [
        f"ragspine/retrieval/mode.py:{_line_of(fallback, 'Settings.from_env()')} from_env *"
    ]
    # The read company_profile.py had before it went through spec_env_default.
    profile = (ROOT / "ragspine/common/company_profile.py").read_text("utf-8")
    direct = (
        "import os\n"
        + profile
        + '\n\ndef _path() -> str:\n    return os.environ.get("RAGSPINE_COMPANY_CONFIG", "")\n'
    )
    found = offenders(_tree_sources(**{"ragspine/common/company_profile.py": direct}))
    assert found == [
        f"ragspine/common/company_profile.py:{_line_of(direct, 'os.environ')} environ RAGSPINE_COMPANY_CONFIG"
    ]
    # A listed process variable is let through only in its module, and a RAGSPINE_* read there is not.
    packaged = (ROOT / "ragspine/models/packaged.py").read_text("utf-8")
    sneaky = packaged + '\n\ndef _mode() -> str:\n    return os.environ.get("RAGSPINE_RETRIEVAL_MODE", "")\n'
    line = _line_of(sneaky, "RAGSPINE_RETRIEVAL_MODE")
    assert offenders(_tree_sources(**{"ragspine/models/packaged.py": sneaky})) == [
        f"ragspine/models/packaged.py:{line} environ RAGSPINE_RETRIEVAL_MODE"
    ]


def test_reverse_proof_a_spec_default_read_from_elsewhere_is_caught() -> None:
    key = "ragspine.common.company_profile.load_company_profile"
    elsewhere = (
        "from ragspine.settings import spec_env_default\n\n"
        f'def vocabulary():\n    return spec_env_default("{key}")\n'
    )
    problems = spec_default_problems(_tree_sources(**{"ragspine/retrieval/mode.py": elsewhere}))
    assert problems == [f"ragspine.retrieval.mode.vocabulary reads the default of {key}"]
    unlisted = (
        'from ragspine import settings\n\ndef f():\n    return settings.spec_env_default("ragspine.x.f")\n'
    )
    assert spec_default_problems(_tree_sources(**{"ragspine/retrieval/mode.py": unlisted})) == [
        "ragspine.retrieval.mode.f reads 'ragspine.x.f', which SPEC_ENV_DEFAULTS does not list"
    ]
    assert spec_default_calls("m", "def f(name):\n    return spec_env_default(name)\n") == [
        ("<not a literal>", "m.f")
    ]
    # Removing the one caller of a listed default is caught too.
    profile = (ROOT / "ragspine/common/company_profile.py").read_text("utf-8")
    gone = profile.replace("spec_env_default(", "_no_default(")
    assert spec_default_problems(_tree_sources(**{"ragspine/common/company_profile.py": gone})) == [
        f"nothing reads the listed default {key}"
    ]


def _line_of(source: str, needle: str) -> int:
    """The 1-based line of the last occurrence of ``needle`` in ``source``."""
    return source[: source.rindex(needle)].count("\n") + 1
