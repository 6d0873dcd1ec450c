"""The CLI's start-up stays light: --help and list import no deep-learning stack, and the source
catalog behind `probcl list` names exactly what the registries hold (no wall-clock assertions)."""

from __future__ import annotations

import subprocess
import sys

from probcl.core import catalog

HEAVY = ("torch", "lightning", "kornia", "sklearn", "scipy", "torchvision")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_help_and_list_import_no_heavy_module():
    help_modules = _modules_after(
        "import contextlib, io\nfrom probcl.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        main(['--help'])\n    except SystemExit:\n        pass"
    )
    list_modules = _modules_after(
        "import contextlib, io\nfrom probcl.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    main(['list'])"
    )
    for modules in (help_modules, list_modules):
        assert "probcl.cli" in modules
        assert not [m for m in HEAVY if m in modules]


def test_catalog_equals_the_registries():
    from probcl.data.builtin import dataset_names
    from probcl.data.specs import SPEC_FORMS
    from probcl.eval import SUITES
    from probcl.methods import METHODS

    assert catalog.method_names() == METHODS.names()
    assert catalog.suite_names() == SUITES.names()
    assert catalog.dataset_names() + SPEC_FORMS == dataset_names()
    assert catalog.suite_titles() == {name: SUITES.get(name).title for name in SUITES.names()}


def test_probcl_load_is_still_public():
    import probcl
    from probcl.runs.loading import load

    assert probcl.load is load


def test_a_config_error_is_reported_before_the_training_stack_is_imported():
    """`probcl pretrain --train.epochs abc` fails on its config without importing torch or Lightning (it took
    7-9 s of start-up before the one-line error when the task was imported first)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom probcl.cli import main\ncode = main(['pretrain', '--train.epochs', 'abc'])\n"
            "print(code, ' '.join(sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    code, *modules = done.stdout.split()
    assert code == "2" and "train.epochs must be an integer, got 'abc'" in done.stderr
    assert not [m for m in HEAVY if m in modules]
