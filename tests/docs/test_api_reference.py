"""The documentation site builds cleanly, and its API reference covers every public name of fedxab.

This is the one place the test suite runs ``mkdocs build --strict``: a broken page, a broken
link or cross-reference, or a griffe warning about a docstring fails it.

A *public name* is, for each module of fedxab (the package itself and every module
``pkgutil.walk_packages`` finds under it):

- the names in the module's ``__all__``, if it has one (as the module defines it at run time);
- otherwise every name not starting with ``_`` that the module itself defines: a class or
  function whose ``__module__`` is the module, and every name a module-level statement of its
  source binds with ``def``, ``class``, an assignment or an annotation (including inside a
  module-level ``if``/``try``/``with`` block, not inside a function or class); a name the
  module imports is not one of its own.

Its API reference entry is ``<module>.<name>`` (``fedxab.HCT``, ``fedxab.algorithms.hct.HCT``),
which must be in the site's ``objects.inv``, the Sphinx inventory mkdocstrings writes of every
object it documents. Every module must be in it too, so a module missing from the pages under
docs/api/ (one ``::: fedxab.x.y`` block each) fails here.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import fedxab

REPO = Path(__file__).resolve().parents[2]


def _modules() -> list[str]:
    return ["fedxab", *(m.name for m in pkgutil.walk_packages(fedxab.__path__, "fedxab."))]


def _bound_at_module_level(body: list[ast.stmt]) -> set[str]:
    """The names module-level statements bind: def, class, assignments, annotations."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.If | ast.For | ast.While | ast.With | ast.Try):
            for block in ("body", "orelse", "finalbody"):
                names |= _bound_at_module_level(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                names |= _bound_at_module_level(handler.body)
    return names


def public_names() -> set[str]:
    """Every public name of fedxab, as ``module.name`` (the definition in the module docstring)."""
    found: set[str] = set()
    for name in _modules():
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        if exported is not None:
            found |= {f"{name}.{n}" for n in exported}
            continue
        own = _bound_at_module_level(ast.parse(inspect.getsource(module)).body)
        own |= {
            n
            for n, value in vars(module).items()
            if (inspect.isclass(value) or inspect.isfunction(value)) and value.__module__ == name
        }
        found |= {f"{name}.{n}" for n in own if not n.startswith("_")}
    return found


def read_inventory(path: Path) -> set[str]:
    """The object names of a Sphinx inventory (version 2): four header lines, then zlib-compressed
    lines ``name domain:role priority uri display-name``."""
    data = path.read_bytes()
    header, rest = [], data
    for _ in range(4):
        line, _, rest = rest.partition(b"\n")
        header.append(line.decode())
    assert header[0] == "# Sphinx inventory version 2", header[0]
    assert "zlib" in header[3], header[3]
    names = set()
    for line in zlib.decompress(rest).decode().splitlines():
        if line.strip():
            names.add(line.split(" ", 1)[0])
    return names


def test_the_lazy_top_level_names_are_written_out():
    """fedxab's ``__all__`` is a literal list (read by the reference and type checkers) of the
    names ``_PUBLIC`` loads on first use; the two must agree."""
    assert sorted(fedxab.__all__) == sorted(fedxab._PUBLIC)


def test_public_names_include_the_documented_example():
    names = public_names()
    assert {"fedxab.HCT", "fedxab.algorithms.hct.HCT", "fedxab.algorithms.hct.t_plus"} <= names
    assert not any(n.rsplit(".", 1)[1].startswith("_") for n in names)


@pytest.fixture(scope="module")
def inventory(tmp_path_factory) -> set[str]:
    try:
        importlib.import_module("mkdocs")
        importlib.import_module("mkdocstrings_handlers.python")
    except ImportError as missing:
        pytest.skip(f"mkdocs is not installed ({missing}): pip install -e '.[docs]'")
    site = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # mkdocs-material's banner,
    )
    if built.returncode != 0:
        pytest.fail(
            f"mkdocs build --strict failed (exit {built.returncode}):\n"
            f"{built.stdout}\n{built.stderr}",
            pytrace=False,
        )
    return read_inventory(site / "objects.inv")


def test_every_module_is_in_the_api_reference(inventory):
    missing = sorted(set(_modules()) - inventory)
    assert not missing, f"modules missing from docs/api/ (add a '::: module' block): {missing}"


def test_every_public_name_is_in_the_api_reference(inventory):
    missing = sorted(public_names() - inventory)
    assert not missing, f"{len(missing)} public names missing from the API reference: {missing}"
