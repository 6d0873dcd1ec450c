"""Registered names read from the source, without importing torch or Lightning (for a fast `probcl list`).

Registration stays where it is (``@METHODS.register("simclr")`` next to each class); this module finds
those calls with :mod:`ast` in a package's modules, so listing names costs milliseconds instead of
the seconds it takes to import the deep-learning stack. ``tests/test_cli_speed.py`` checks that the
catalog equals the imported registries.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
CLASS_FILTER = ":classes="  # `fashion-mnist:classes=0-7`: only these classes, relabelled 0..K-1 in the given order
# dataset specs besides the registered names: paths, and a class filter on a registered name
SPEC_FORMS = ["folder:PATH[:stream=false]", "npz:PATH", f"NAME{CLASS_FILTER}0-7 (or 8,9)"]


def registered_names(registry: str, package: str) -> list[str]:
    """Sorted names passed as string literals to ``<registry>.register(...)`` in ``probcl/<package>/*.py``."""
    names: set[str] = set()
    for path in sorted((PACKAGE_ROOT / package).glob("*.py")):
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
                names.add(node.args[0].value)
    return sorted(names)


def method_names() -> list[str]:
    """Names of the self-supervised methods (``probcl.methods.METHODS``)."""
    return registered_names("METHODS", "methods")


def dataset_names() -> list[str]:
    """Dataset registry names plus the other spec forms (as ``probcl.data.datasets.dataset_names``)."""
    return registered_names("DATASETS", "data") + SPEC_FORMS


def suite_names() -> list[str]:
    """Names of the evaluation suites (``probcl.eval.SUITES``)."""
    return registered_names("SUITES", "eval")
