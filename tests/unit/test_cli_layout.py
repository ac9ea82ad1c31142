"""The ``fedxab`` command is a thin layer (issue 38): every function in fedxab/cli/, each
command and each of its helpers, is at most 60 lines long, from its ``def`` line to its last
line (signature and docstring included, decorators not); what a command does beyond parsing,
calling and printing lives in the library, with its own tests."""

from __future__ import annotations

import ast
from pathlib import Path

import fedxab.cli
from fedxab.cli import app

LIMIT = 60
CLI = Path(fedxab.cli.__file__).parent


def _lengths(source: str) -> dict[str, int]:
    """Every function of ``source`` (nested ones too) by qualified name: its length in lines."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                assert child.end_lineno is not None
                lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(source), "")
    return lengths


def _cli_functions() -> dict[tuple[str, str], int]:
    """Every function of fedxab/cli/, by (module, qualified name): its length."""
    found = {}
    for path in sorted(CLI.glob("*.py")):
        module = "fedxab.cli" if path.stem == "__init__" else f"fedxab.cli.{path.stem}"
        for name, length in _lengths(path.read_text()).items():
            found[module, name] = length
    return found


def test_no_function_of_the_command_line_is_longer_than_60_lines():
    long = {f"{m}.{n}": k for (m, n), k in _cli_functions().items() if k > LIMIT}
    assert not long, f"functions of fedxab/cli/ over {LIMIT} lines (move logic out): {long}"


def test_every_command_is_among_the_functions_measured():
    registered = list(app.registered_commands)
    for group in app.registered_groups:  # fedxab keys ...
        assert group.typer_instance is not None
        registered += group.typer_instance.registered_commands
    callbacks = [command.callback for command in registered]
    assert len(callbacks) >= 9  # run server client broker audit plot dashboard reproduce, keys
    measured = _cli_functions()
    for callback in callbacks:
        assert callback is not None
        key = (callback.__module__, callback.__qualname__)
        assert key in measured, f"{key} is not in fedxab/cli/"


def test_the_length_counts_the_signature_and_the_body():
    source = "def f(\n    a,\n):\n" + '    """Doc."""\n' + "    x = a\n" * 58 + "    return x\n"
    assert _lengths(source) == {"f": 3 + 1 + 58 + 1}
