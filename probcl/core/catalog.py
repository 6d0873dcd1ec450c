"""Registered names read from the source, without importing torch or Lightning (for a fast `probcl list`).

Registration stays where it is (``@METHODS.register("simclr")`` next to each class); this module finds
those calls with :mod:`ast` in a package's modules, so listing names costs milliseconds instead of
the seconds it takes to import the deep-learning stack. ``tests/commands/test_cli_speed.py`` checks that the
catalog equals the imported registries.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def registered_calls(registry: str, package: str) -> dict[str, dict[str, object]]:
    """``{name: {keyword: literal value}}`` of the ``<registry>.register("name", ...)`` calls in
    ``probcl/<package>/*.py`` (keywords whose value is not a literal are left out)."""
    calls: dict[str, dict[str, object]] = {}
    for path in sorted((PACKAGE_ROOT / package).glob("*.py")):
        calls.update({name: dict(kw) for name, kw in _calls_in(path, path.stat().st_mtime_ns, registry).items()})
    return dict(sorted(calls.items()))


@functools.cache
def _calls_in(path: Path, mtime_ns: int, registry: str) -> dict[str, dict[str, object]]:
    """The register calls of one file, parsed once per version of it (a report asks for suite titles per table)."""
    calls: dict[str, dict[str, object]] = {}
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "register"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == registry
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            calls[node.args[0].value] = {
                kw.arg: kw.value.value for kw in node.keywords if kw.arg and isinstance(kw.value, ast.Constant)
            }
    return calls


def registered_names(registry: str, package: str) -> list[str]:
    """Sorted names passed as string literals to ``<registry>.register(...)`` in ``probcl/<package>/*.py``."""
    return list(registered_calls(registry, package))


def method_names() -> list[str]:
    """Names of the self-supervised methods (``probcl.methods.METHODS``)."""
    return registered_names("METHODS", "methods")


def dataset_names() -> list[str]:
    """Dataset registry names (``probcl.data.builtin.DATASETS``; :mod:`probcl.data.specs` has the other forms)."""
    return registered_names("DATASETS", "data")


def suite_names() -> list[str]:
    """Names of the evaluation suites (``probcl.eval.SUITES``)."""
    return registered_names("SUITES", "eval")


def suite_titles() -> dict[str, str]:
    """``{suite: report title}`` of the evaluation suites (the name where a suite registers no title)."""
    return {name: str(kw.get("title", name)) for name, kw in registered_calls("SUITES", "eval").items()}
