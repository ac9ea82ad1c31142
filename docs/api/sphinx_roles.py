"""A griffe extension of the API reference (mkdocs.yml loads it): fedxab's docstrings are written
with Sphinx roles, which Markdown would show verbatim (``:class:`~fedxab.x.Y```).

Once griffe has loaded the package, every docstring is rewritten, in the docs build only (the
code is not touched):

- ``:class:`~fedxab.x.Y```, ``:func:`name```, ``:meth:`Class.method``` and the other Python roles
  (``mod``, ``data``, ``attr``, ``exc``, ``obj``) become a cross-reference ``[`Y`][fedxab.x.Y]``
  when the name resolves, as Sphinx would resolve it (the docstring's scope: the object, its class,
  its module and what that imports), to a documented fedxab object; a leading ``~`` shows only the
  last component, and functions and methods get ``()`` as in Sphinx. Any other target (the
  standard library, numpy, a private name) is shown as code, with no link.
- a reST literal-block marker ``::`` at the end of a paragraph becomes ``:``, and one alone on its
  line goes (the indented block after it is a Markdown code block already);
- a reST simple table (rows between ``====  ====`` borders; a row with a blank cell before the
  last column continues the row above) becomes a Markdown table.

A cross-reference that resolves here but is not in the reference fails ``mkdocs build --strict``,
which is what the test suite runs (tests/docs/test_api_reference.py).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|data|attr|exc|obj|const):`([^`]+)`")
_LITERAL_MARKER = re.compile(r"(\S)::[ \t]*$", re.MULTILINE)
_LONE_LITERAL_MARKER = re.compile(r"^[ \t]*::[ \t]*$", re.MULTILINE)
_TABLE_BORDER = re.compile(r"^ *=+( +=+)+ *$")
_CALLABLE_ROLES = {"func", "meth"}


def _documented(obj: griffe.Object | griffe.Alias, root: str) -> str | None:
    """The path under which ``obj`` is documented, or ``None`` if the reference omits it."""
    try:
        target = obj.final_target if obj.is_alias else obj
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    path = target.path
    if path.split(".")[0] != root or any(part.startswith("_") for part in path.split(".")):
        return None
    return path


def _lookup(pkg: griffe.Module, path: str) -> griffe.Object | griffe.Alias | None:
    parts = path.split(".")
    if parts[0] != pkg.name:
        return None
    obj: Any = pkg
    for part in parts[1:]:
        try:
            obj = (obj.all_members if obj.is_class else obj.members)[part]  # with inherited ones
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
    return obj


def _resolve(obj: griffe.Object, pkg: griffe.Module, name: str) -> str | None:
    """The documented path of ``name`` as written in ``obj``'s docstring, if any."""
    head, _, rest = name.partition(".")
    candidates = [name]
    scope: Any = obj
    while scope is not None:  # the object's scope, then its parents' (class, module)
        try:
            resolved = scope.resolve(head)
        except griffe.NameResolutionError:
            if scope.is_class and head in scope.all_members:  # an inherited member
                resolved = f"{scope.path}.{head}"
            else:
                scope = scope.parent
                continue
        candidates.insert(0, f"{resolved}.{rest}" if rest else resolved)
        break
    for candidate in candidates:
        found = _lookup(pkg, candidate)
        if found is not None:
            return _documented(found, pkg.name)
    return None


def _rewrite(obj: griffe.Object, pkg: griffe.Module, text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        role, target = match.group(1), re.sub(r"\s+", "", match.group(2))  # a role may wrap
        short = target.startswith("~")
        name = target.lstrip("~!.")
        shown = name.rsplit(".", 1)[-1] if short else name
        if role in _CALLABLE_ROLES:
            shown += "()"
        path = _resolve(obj, pkg, name)
        return f"[`{shown}`][{path}]" if path else f"`{shown}`"

    text = _LITERAL_MARKER.sub(r"\1:", _ROLE.sub(replace, text))
    return _simple_tables(_LONE_LITERAL_MARKER.sub("", text))


def _simple_tables(text: str) -> str:
    """Every reST simple table of ``text`` as a Markdown table (first row: the header)."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not _TABLE_BORDER.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        spans = [m.span() for m in re.finditer(r"=+", lines[i])]
        rows: list[list[str]] = []
        borders = 1
        i += 1
        while i < len(lines) and borders < 3:
            line = lines[i]
            i += 1
            if _TABLE_BORDER.match(line):
                borders += 1
                continue
            # the last column takes the rest of the line
            cells = [
                line[a : spans[k + 1][0]] if k + 1 < len(spans) else line[a:]
                for k, (a, _) in enumerate(spans)
            ]
            cells = [c.strip() for c in cells]
            if rows and borders == 2 and not all(cells[:-1]):  # continues the row above
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
            else:
                rows.append(cells)
        if out and out[-1].strip():
            out.append("")
        out.append("| " + " | ".join(rows[0]) + " |")
        out.append("|" + " --- |" * len(spans))
        out.extend("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows[1:])
        out.append("")
    return "\n".join(out)


def _walk(obj: griffe.Object, seen: set[str]) -> Any:
    if obj.path in seen:
        return
    seen.add(obj.path)
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member, seen)


class SphinxRoles(griffe.Extension):
    """Rewrite the Sphinx roles of every docstring of a loaded package as Markdown."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _walk(pkg, set()):
            if obj.docstring is not None:
                obj.docstring.value = _rewrite(obj, pkg, obj.docstring.value)
