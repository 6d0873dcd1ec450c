"""The generated pages of the docs site: the configuration reference and the CLI reference.

``docs/hooks.py`` (a MkDocs hook) calls :func:`generated_blocks` on every build and pastes each block
over its marker line (``<!-- generated: config-reference -->``), so the reference cannot drift from the
code: the configuration reference is read from the config dataclasses (:mod:`probcl.config`), every
registered method's ``Params`` and every evaluation suite's options; the CLI reference from the argparse
parsers of ``probcl/cli.py`` and ``probcl/commands/``.

Where a field's description lives: the ``#`` comment on the field's own line(s) in the dataclass
(``lr: Annotated[float, Positive] = 1e-3  # peak learning rate``), read with :mod:`tokenize` over the
line span :mod:`ast` gives the field's statement, so a comment that ``ruff format`` moves inside the
wrapped parentheses still belongs to its field. A field without one is an error
(:func:`undescribed_fields`; ``tests/docs/test_reference.py`` fails on it).

    python3 -m scripts.docs_reference config      # print the configuration reference (Markdown)
    python3 -m scripts.docs_reference cli         # print the CLI reference
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import io
import os
import sys
import tokenize
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from probcl.config import ALIASES, Bound, Config
from probcl.tasks.benchmark.grid import BenchmarkConfig, BenchmarkEval
from probcl.tasks.evaluate import EvaluateSettings
from probcl.tasks.sample import SampleOptions
from probcl.tasks.score import ScoreOptions

SECTIONS = ("data", "augment", "model", "optim", "train")  # Config's dataclass sections, in reading order
# (command, settings dataclass, where its fields come from): each sub-command's flags are read into one of these
COMMAND_SETTINGS = (
    ("probcl evaluate", EvaluateSettings, "`probcl evaluate`'s flags; `probcl.evaluate(...)`'s keyword arguments"),
    ("probcl score", ScoreOptions, "`probcl score`'s flags (`--option ood.KEY=VALUE` sets `combination` and `k`)"),
    ("probcl sample", SampleOptions, "`probcl sample`'s flags"),
)


@functools.cache
def comments_by_field(path: str, class_name: str) -> dict[str, str]:
    """``{field: comment}`` of the annotated fields of top-level class ``class_name`` in the file ``path``:
    the text of every ``#`` comment between the field statement's first and last line, joined."""
    source = Path(path).read_text()
    lines = source.splitlines()
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()

    def own_comment(st: ast.AnnAssign) -> str:
        above = st.lineno  # a block of whole-line comments right above the field, then the field's own
        while above - 1 in comments and lines[above - 2].lstrip().startswith("#"):
            above -= 1
        span = range(above, (st.end_lineno or st.lineno) + 1)
        return " ".join(comments[line] for line in span if line in comments)

    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return {
                st.target.id: own_comment(st)
                for st in node.body
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
            }
    raise LookupError(f"class {class_name} not found at the top level of {path}")


def declaring_class(cls: type, name: str) -> type:
    """The class in ``cls``'s MRO whose own annotations declare field ``name``."""
    return next(klass for klass in cls.__mro__ if name in klass.__dict__.get("__annotations__", {}))


def field_description(cls: type, name: str) -> str:
    """The comment of field ``name`` of dataclass ``cls`` where it is declared; "" when it has none."""
    klass = declaring_class(cls, name)
    return comments_by_field(inspect.getfile(klass), klass.__qualname__).get(name, "")


def option_classes() -> Iterator[tuple[str, type]]:
    """(prefix, dataclass) for every documented option class: the config sections, the top-level keys,
    every method's ``Params`` and every suite's options."""
    from probcl.eval import SUITES
    from probcl.methods import METHODS

    yield "", Config
    hints = typing.get_type_hints(Config)
    for section in SECTIONS:
        yield section, hints[section]
    for method in METHODS.names():
        yield f"method_args ({method})", METHODS.get(method).Params
    for suite in SUITES.names():
        yield f"--option {suite}.", SUITES.get(suite).options
    yield "benchmark", BenchmarkConfig
    yield "benchmark eval", BenchmarkEval
    for _, cls, _ in COMMAND_SETTINGS:
        yield cls.__name__, cls


def _fields(cls: type, prefix: str = "") -> Iterator[tuple[str, type, dataclasses.Field, Any]]:
    """(dotted key, declaring dataclass, field, annotation) of ``cls``'s fields, nested dataclass fields (EBCLR's
    ``sgld``) expanded with their own keys; the sections of :class:`~probcl.config.Config` are left out (each has
    its own table)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            if cls is not Config:
                yield from _fields(tp, f"{prefix}{f.name}.")
            continue
        yield f"{prefix}{f.name}", cls, f, tp


def undescribed_fields() -> list[str]:
    """``Class.field`` for every documented option without a description (should be none)."""
    missing = set()
    for _, cls in option_classes():
        for _, owner, f, _ in _fields(cls):
            if not field_description(owner, f.name):
                klass = declaring_class(owner, f.name)
                missing.add(f"{klass.__module__}.{klass.__qualname__}.{f.name}")
    return sorted(missing)


def type_name(tp: Any) -> str:
    """An annotation as the reference prints it: bounds dropped, ``Literal`` as its choices."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_name(a) for a in args)
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any"
    if origin in (tuple, list, dict):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]" if args else origin.__name__
    return getattr(tp, "__name__", str(tp))


def bounds(tp: Any) -> str:
    """The ranges declared with ``Annotated[..., Bound]`` on a field ("" when none)."""
    if typing.get_origin(tp) is not typing.Annotated:
        return ""
    return ", ".join(a.describe() for a in typing.get_args(tp)[1:] if isinstance(a, Bound))


def default_text(f: dataclasses.Field) -> str:
    """A field's default as YAML would write it."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    if dataclasses.is_dataclass(value):
        return "(section)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def options_table(cls: type, prefix: str) -> str:
    """A Markdown table of the fields of dataclass ``cls``: key, type, default, bounds, description."""
    rows = ["| key | type | default | bounds | description |", "|---|---|---|---|---|"]
    for key, owner, f, tp in _fields(cls):
        rows.append(
            f"| `{prefix}{key}` | {type_name(tp)} | {default_text(f)} | {bounds(tp)} "
            f"| {_cell(field_description(owner, f.name))} |"
        )
    return "\n".join(rows) if len(rows) > 2 else "This takes no options."


def config_reference() -> str:
    """The configuration reference: the top-level keys, each section, each method's ``method_args``."""
    from probcl.methods import METHODS

    hints = typing.get_type_hints(Config)
    parts = ["## Top-level keys", "", options_table(Config, ""), ""]
    for section in SECTIONS:
        cls = hints[section]
        parts += [f"## `{section}`", "", (cls.__doc__ or "").strip(), "", options_table(cls, f"{section}."), ""]
    parts += [
        "## `method_args`",
        "",
        "Each method's own hyper-parameters (its `Params` dataclass); the method's page says where each "
        "default comes from.",
        "",
    ]
    for method in METHODS.names():
        params = METHODS.get(method).Params
        parts += [f"### `{method}`", "", options_table(params, "method_args."), ""]
    short = ", ".join(f"`{flag}` = `{key}`" for flag, key in ALIASES.items())
    parts += ["## Short flags", "", f"`probcl pretrain` accepts these short forms of config keys: {short}.", ""]
    parts += [
        "## Benchmark files",
        "",
        "The keys of a `probcl benchmark` YAML file ([Benchmarks and studies](../how-to/benchmark.md)); a file may"
        " also start from another with `extends:` ([how](../how-to/benchmark.md#one-study-another-budget-extends)).",
        "",
        options_table(BenchmarkConfig, ""),
        "",
        "`eval:` (how every cell is evaluated):",
        "",
        options_table(BenchmarkEval, "eval."),
        "",
    ]
    parts += [
        "## Command settings",
        "",
        "What `probcl evaluate`, `probcl score` and `probcl sample` read their flags into, one settings object each,"
        " checked against these bounds before any work (an error names the flag; the flags and their spellings are"
        " in the [CLI reference](cli.md)).",
        "",
    ]
    for command, cls, source in COMMAND_SETTINGS:
        parts += [f"### `{command}`: `{cls.__name__}`", "", f"{source}.", "", options_table(cls, ""), ""]
    return "\n".join(parts)


def suite_options_reference() -> str:
    """Each evaluation suite's options (``--option SUITE.KEY=VALUE``), one table per suite."""
    from probcl.eval import SUITES

    parts = []
    for name in SUITES.names():
        suite = SUITES.get(name)
        needs = f" Needs a probcl run: {suite.needs_run}." if suite.needs_run else ""
        parts += [f"### `{name}`", "", f"{suite.title}.{needs}", "", options_table(suite.options, ""), ""]
    return "\n".join(parts)


def _action_row(action: argparse.Action) -> str:
    name = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}`"
    if action.choices:
        name += " {" + ",".join(map(str, action.choices)) + "}"
    flag = isinstance(action, (argparse._StoreConstAction, argparse._StoreTrueAction, argparse._StoreFalseAction))
    shown = not flag and action.default is not None and action.default != [] and action.default is not argparse.SUPPRESS
    default = f"`{action.default}`" if shown else ""
    return f"| {_cell(name)} | {_cell(default)} | {_cell(str(action.help or ''))} |"  # str: a lazily rendered help


def _documented(action: argparse.Action) -> bool:
    """Arguments a user is shown: not --help, not the hidden retired spellings (help=SUPPRESS)."""
    return not isinstance(action, argparse._HelpAction) and action.help is not argparse.SUPPRESS


def cli_reference() -> str:
    """Every sub-command of ``probcl``: its usage line, description and a table of its arguments."""
    from probcl.cli import build_parser

    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps the usage lines to $COLUMNS
    try:
        return _cli_reference(*build_parser())
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns


def _cli_reference(parser: argparse.ArgumentParser, commands: dict) -> str:
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = []
    for name in commands:
        sub = subparsers.choices[name]
        usage = sub.format_usage().strip()
        parts += [f"## `probcl {name}`", "", (sub.description or "").strip(), "", "```text", usage, "```", ""]
        parts += ["| argument | default | help |", "|---|---|---|"]
        parts += [_action_row(a) for a in sub._actions if _documented(a)]
        if getattr(commands[name], "ACCEPTS_OVERRIDES", False):
            parts += [
                "| `--section.key VALUE` | | any config key (see the [configuration reference](configuration.md)) |"
            ]
        parts.append("")
    return "\n".join(parts)


def method_presets_table(method: str) -> str:
    """The package's presets of ``method``: what each sets besides the defaults (method_args, optimiser, budget)."""
    import yaml

    from probcl.core.presets import PRESETS_DIR

    rows = ["| preset | `method_args` | optimiser | epochs x batch |", "|---|---|---|---|"]
    for path in sorted(PRESETS_DIR.rglob("*.yaml")):
        tree = yaml.safe_load(path.read_text()) or {}
        if tree.get("method") != method:
            continue
        args = ", ".join(f"{k}: {v}" for k, v in (tree.get("method_args") or {}).items()) or "(defaults)"
        optim = tree.get("optim") or {}
        train = tree.get("train") or {}
        opt = " ".join(str(optim[k]) for k in ("name", "lr") if k in optim) or "(default)"
        budget = f"{train.get('epochs', '-')} x {train.get('batch_size', '-')}"
        rows.append(f"| `{path.relative_to(PRESETS_DIR).with_suffix('')}` | {_cell(args)} | {opt} | {budget} |")
    return "\n".join(rows) if len(rows) > 2 else "No preset ships for this method."


def generated_blocks() -> dict[str, str]:
    """Marker name -> Markdown; ``docs/hooks.py`` replaces ``<!-- generated: NAME -->`` lines with them
    (``method-args NAME`` and ``method-presets NAME`` for each registered method)."""
    from probcl.eval.ood_scores import SCORES
    from probcl.methods import METHODS

    blocks = {
        "config-reference": config_reference(),
        "suite-options": suite_options_reference(),
        "cli-reference": cli_reference(),
        "ood-scores": SCORES.markdown_table(),
    }
    for method in METHODS.names():
        blocks[f"method-args {method}"] = options_table(METHODS.get(method).Params, "")
        blocks[f"method-presets {method}"] = method_presets_table(method)
    return blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("page", choices=["config", "suites", "cli", "missing"])
    args = parser.parse_args()
    if args.page == "missing":
        missing = undescribed_fields()
        print("\n".join(missing) or "every option has a description")
        sys.exit(1 if missing else 0)
    print({"config": config_reference, "suites": suite_options_reference, "cli": cli_reference}[args.page]())


if __name__ == "__main__":
    main()
