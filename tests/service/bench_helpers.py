"""The benchmark's resource phases (``bench/soak_limits.py``), loaded for the tests that check the same
behaviour with smaller loads and generous bounds."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.service.helpers import REPO_ROOT


def soak_limits() -> ModuleType:
    name = "bench_soak_limits"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "bench" / "soak_limits.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module
