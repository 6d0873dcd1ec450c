"""pyproject.toml declares what probcl imports: every third-party module imported when a probcl module
loads is a runtime dependency, every runtime dependency is imported somewhere (test-only packages belong to
the dev extra), and modules imported inside functions (lazily, or for optional features) come from a
runtime dependency or an extra."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import tomllib

CHECKOUT = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def _imports() -> tuple[set[str], set[str]]:
    """Top-level third-party module names imported by probcl: (when a module loads, only in functions)."""
    at_load: set[str] = set()
    in_functions: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                names = [a.name for a in child.names] if isinstance(child, ast.Import) else [child.module or ""]
                if isinstance(child, ast.ImportFrom) and child.level:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in ("probcl", "__future__"):
                        (in_functions if in_function else at_load).add(top)
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.If) and ast.unparse(child.test) == "TYPE_CHECKING":
                continue  # never runs
            visit(child, nested)

    for path in (CHECKOUT / "probcl").rglob("*.py"):
        visit(ast.parse(path.read_text()), False)
    return at_load, in_functions - at_load


def _distribution(module: str, installed: dict[str, list[str]]) -> str:
    """The distribution that installs ``module`` here (its own name when it is not installed)."""
    return _name(installed.get(module, [module])[0])


def test_runtime_dependencies_are_exactly_what_probcl_imports():
    project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    extras = {_name(r) for reqs in project["optional-dependencies"].values() for r in reqs}
    at_load, in_functions = _imports()
    installed = packages_distributions()
    loaded = {_distribution(m, installed) for m in at_load}
    lazy = {_distribution(m, installed) for m in in_functions}
    assert loaded - runtime == set(), "imported when a probcl module loads but not a runtime dependency"
    assert runtime - loaded - lazy == set(), "runtime dependencies probcl never imports (test-only? -> dev extra)"
    assert lazy - runtime - extras == set(), "imported inside functions but in no dependency or extra"
    assert {"tensorboard", "mlflow-skinny", "wandb", "torchmetrics"} <= {
        _name(r) for r in project["optional-dependencies"]["dev"]
    }
