"""DESIGN.md's layering: the sans-I/O algorithms (fedxab.algorithms) import nothing with I/O,
and the run core (fedxab.run) no transport: checked in a fresh interpreter per module, against
what numpy and scipy import on their own."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

import fedxab.algorithms
import fedxab.run

IO_MODULES = ("sqlite3", "asyncio", "aiokafka", "fedxab.broker.base", "fedxab.agents")


def _loaded_after(module: str) -> set[str]:
    """The I/O modules in sys.modules once ``module`` is imported (a fresh interpreter)."""
    code = (
        "import json, sys, importlib; importlib.import_module(sys.argv[1]); "
        f"print(json.dumps([m for m in {IO_MODULES!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, module], capture_output=True, text=True, check=True
    )
    return set(json.loads(out.stdout))


BASELINE = _loaded_after("scipy.optimize") | _loaded_after("numpy")
"""What the third-party libraries the algorithms use import by themselves (nothing, today)."""


def _modules(package) -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__, package.__name__ + "."))


@pytest.mark.parametrize("module", _modules(fedxab.algorithms))
def test_an_algorithm_module_imports_no_io(module):
    assert _loaded_after(module) - BASELINE == set()


@pytest.mark.parametrize(
    "module", ["fedxab.run.session", "fedxab.run.identity", "fedxab.run.outcome"]
)
def test_the_run_sessions_import_no_io(module):
    assert _loaded_after(module) - BASELINE == set()
