"""The tutorials, executed end to end in a fresh folder, block by block, as a reader would: shell blocks run
``probcl`` commands (through ``probcl.cli.main``, the function the installed ``probcl`` calls, in this process:
a command's own process would spend most of its time importing torch and Lightning again), Python blocks run in one
namespace per page, a YAML block with ``title="FILE"`` is written to FILE. Then a few checks that the outputs say
what the page says they say."""

from __future__ import annotations

import contextlib
import csv
import doctest
import io
import json
import shlex
from pathlib import Path

import pytest
from markdown_blocks import ROOT, blocks, shell_commands

from probcl.cli import main

TUTORIALS = ROOT / "docs" / "tutorials"


def run_page(page: Path, folder: Path) -> dict:
    """Execute every block of ``page`` in ``folder``; returns the Python namespace the blocks shared. A ``text``
    block of class ``expected`` (```` ```{.text .expected} ````) is the output the block before it prints, as a
    reader should see it: compared as doctest compares (``...`` stands for any text, e.g. a number that the CPU's
    precision moves; runs of blanks are one blank)."""
    namespace: dict = {"__name__": "__tutorial__"}
    printed: str | None = None  # what the last executed block printed
    for block in blocks(page):
        where = f"{block.page}:{block.line}"
        if block.language == "text" and ".expected" in block.attributes:
            assert printed is not None, f"{where}: an expected output must follow the block that prints it"
            check_output(where, block.code, printed)
            printed = None
        elif block.language == "yaml" and block.title:
            (folder / block.title).write_text(block.code)
        elif block.language == "bash":
            printed = ""
            for command in shell_commands(block.code):
                argv = shlex.split(command, comments=True)
                assert argv[0] == "probcl", f"{where}: tutorials run probcl commands only, got {command!r}"
                out, err = io.StringIO(), io.StringIO()
                with contextlib.chdir(folder), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = main(argv[1:])
                assert code == 0, f"{where}: {command} exited {code}:\n{err.getvalue()[-3000:]}"
                printed += out.getvalue()
        elif block.language == "python":
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(block.code, where, "exec"), namespace)
            printed = out.getvalue()
        else:
            assert block.language in ("text", "yaml"), f"{where}: a tutorial block of language {block.language!r}"
    return namespace


def check_output(where: str, expected: str, printed: str) -> None:
    """``printed`` matches the page's ``expected`` output (doctest's ELLIPSIS and NORMALIZE_WHITESPACE)."""
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    assert doctest.OutputChecker().check_output(expected, printed, flags), (
        f"{where}: the page shows\n{expected}\nbut the block printed\n{printed}"
    )


def test_an_expected_output_is_compared_as_doctest_compares():
    check_output("page", "mean ... digits\n8 images\n", "mean 0.25 digits\n8   images\n")
    with pytest.raises(AssertionError, match="the page shows"):
        check_output("page", "0 flagged\n", "8 flagged\n")


@pytest.fixture
def in_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROBCL_NO_PROGRESS", "1")
    return tmp_path


@pytest.mark.slow
def test_your_images_in_10_minutes(in_folder):
    namespace = run_page(TUTORIALS / "your-images.md", in_folder)
    rows = {Path(r["id"]).name: r for r in csv.DictReader(open(in_folder / "scores.csv"))}
    assert len(rows) == 8
    # uniform noise is unlike every digit: the default decision must flag all three
    assert [rows[f"noise-{i}.png"]["ood"] for i in range(3)] == ["True"] * 3
    evaluation = json.loads((in_folder / "runs/my-simclr/eval.json").read_text())
    assert evaluation["linear"]["top1"] > 20  # ten classes: chance is 10 %
    assert namespace["z"].shape[0] == 8
    assert (in_folder / "runs/my-simclr/export/model.onnx").is_file() and (in_folder / "sheet.html").is_file()


@pytest.mark.slow
def test_compare_two_methods(in_folder):
    run_page(TUTORIALS / "compare-methods.md", in_folder)
    results = json.loads((in_folder / "runs/compare/results.json").read_text())
    assert set(results["groups"]) == {"simclr", "byol"}
    report = (in_folder / "runs/compare/report.md").read_text()
    assert "simclr" in report and "byol" in report and (in_folder / "runs/compare/report.html").is_file()


@pytest.mark.slow
def test_uncertainty_and_ood(in_folder):
    namespace = run_page(TUTORIALS / "uncertainty-ood.md", in_folder)
    for run, own in (("tau", "uncertainty:neg_u"), ("csimclr", "vmf_density")):
        sets = json.loads((in_folder / "runs" / run / "eval.json").read_text())["ood"]["sets"]
        assert set(sets) == {"noise:gaussian", "inverted"} and own in sets["noise:gaussian"]
        assert sets["noise:gaussian"]["combined"]["auroc"] > 0.9  # Gaussian noise vs digits: the guards see it
    assert namespace["tau"].uncertainty(namespace["noise"]).shape == (200,)
