"""probcl list: registered methods, datasets, evaluation suites and presets (with a line each), one name a line."""

from __future__ import annotations

import argparse

NAME = "list"
HELP = "registered methods, datasets, evaluation suites and presets (each with its one-line description)"
ACCEPTS_OVERRIDES = False  # no --section.key VALUE config overrides
AFTER_A_STOP = "run the same command again"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("group", nargs="?", choices=["methods", "datasets", "suites", "presets"], help="only this group")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.core.catalog import dataset_names, method_names, suite_names
    from probcl.core.presets import list_presets, preset_description
    from probcl.data.specs import SPEC_FORMS

    groups = {
        "methods": method_names(),
        "datasets": dataset_names() + SPEC_FORMS,
        "suites": suite_names(),
        "presets": list_presets(),
    }
    titles = {"suites": "evaluation suites"}
    width = max(map(len, groups["presets"]), default=0)
    for group, names in groups.items():
        if args.group and args.group != group:
            continue
        print(f"{titles.get(group, group)}:")
        for name in names:
            print(f"  {name.ljust(width)}  {preset_description(name)}" if group == "presets" else f"  {name}")
    return 0
