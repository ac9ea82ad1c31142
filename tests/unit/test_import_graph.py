"""DESIGN.md's layering: the sans-I/O algorithms (fedxab.algorithms) import nothing with I/O,
and the run core (fedxab.run) no transport.

Each module is imported in a fresh interpreter, which then reports which of the I/O modules
ended up in ``sys.modules``. numpy and scipy are checked the same way first (``BASELINE``): a
module one of them imports by itself (none, with today's versions) is not held against fedxab, so
the tests fail only when a *fedxab* module brings one in. (The algorithms import only the pure
:mod:`fedxab.privacy.release`, never the SQLite ledger or its gate.) At the top, no module outside
fedxab.cli imports it (read from the source, so that an import inside a function counts too)."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import fedxab
import fedxab.algorithms
import fedxab.privacy

ALGORITHMS_MUST_NOT_LOAD = ("sqlite3", "asyncio", "aiokafka", "fedxab.broker", "fedxab.agents")
RUN_CORE_MUST_NOT_LOAD = ("sqlite3", "asyncio", "aiokafka", "fedxab.broker.base", "fedxab.agents")
"""The run core may use the pure message codec (fedxab.broker.codec), not a broker."""

PRIVACY_MUST_NOT_IMPORT = ("asyncio", "fedxab.config", "fedxab.broker", "fedxab.security")
"""Privacy (accounting, the ledger, its record format) sits below the agents and the config: no
event loop, no broker, no key loading. Reading the ledger topic is fedxab.agents.ledger_mirror."""
PRIVACY_MAY_IMPORT = ("fedxab.broker.codec", "fedxab.security.signing")
"""The pure formats below it: the message codec (a ledger record is an envelope) and the
signature primitives (a record's signature, verified with keys the caller loaded)."""


def _loaded_after(module: str, watched: tuple[str, ...]) -> set[str]:
    """The ``watched`` modules in sys.modules once ``module`` is imported (a fresh interpreter)."""
    code = (
        "import json, sys, importlib; importlib.import_module(sys.argv[1]); "
        "watched = json.loads(sys.argv[2]); "
        "print(json.dumps([m for m in watched if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, module, json.dumps(watched)],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(out.stdout))


def _baseline(watched: tuple[str, ...]) -> set[str]:
    """What the third-party libraries the algorithms use import by themselves."""
    return _loaded_after("numpy", watched) | _loaded_after("scipy.optimize", watched)


def _modules(package) -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__, package.__name__ + "."))


@pytest.fixture(scope="module")
def algorithms_baseline() -> set[str]:
    return _baseline(ALGORITHMS_MUST_NOT_LOAD)


@pytest.fixture(scope="module")
def run_core_baseline() -> set[str]:
    return _baseline(RUN_CORE_MUST_NOT_LOAD)


@pytest.mark.parametrize("module", _modules(fedxab.algorithms))
def test_an_algorithm_module_imports_no_io(module, algorithms_baseline):
    assert _loaded_after(module, ALGORITHMS_MUST_NOT_LOAD) - algorithms_baseline == set()


@pytest.mark.parametrize(
    "module",
    [
        "fedxab.run.session",
        "fedxab.run.identity",
        "fedxab.run.outcome",
        "fedxab.run.envelope",
        "fedxab.run.failures",
        "fedxab.run.job",
        "fedxab.run.server_party",
        "fedxab.run.watch",
        "fedxab.run.client_party",
    ],
)
def test_the_run_sessions_import_no_io(module, run_core_baseline):
    assert _loaded_after(module, RUN_CORE_MUST_NOT_LOAD) - run_core_baseline == set()


def _imported_modules(tree: ast.AST) -> set[str]:
    """Every module an ``import`` or ``from ... import`` of ``tree`` names (functions' too)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_only_the_command_line_imports_the_command_line():
    """fedxab.cli is the top floor: the library never reaches up into it, not even lazily (the
    commands print, the library logs)."""
    package = Path(fedxab.__file__).parent
    upward = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if path.parent != package / "cli"
        and any(
            name == "fedxab.cli" or name.startswith("fedxab.cli.")
            for name in _imported_modules(ast.parse(path.read_text()))
        )
    ]
    assert upward == []


def _forbidden_in_privacy(name: str) -> bool:
    return any(name == m or name.startswith(f"{m}.") for m in PRIVACY_MUST_NOT_IMPORT) and not any(
        name == m or name.startswith(f"{m}.") for m in PRIVACY_MAY_IMPORT
    )


@pytest.mark.parametrize("module", _modules(fedxab.privacy))
def test_privacy_imports_no_broker_config_security_or_asyncio(module):
    """Read from the source (an import inside a function counts), then checked in a fresh
    interpreter (what the allowed modules bring in counts too)."""
    path = Path(fedxab.privacy.__file__).parent / f"{module.rsplit('.', 1)[1]}.py"
    named = _imported_modules(ast.parse(path.read_text()))
    assert sorted(filter(_forbidden_in_privacy, named)) == []
    watched = ("asyncio", "fedxab.config", "fedxab.broker.base", "fedxab.security.agents")
    assert _loaded_after(module, watched) == set()
