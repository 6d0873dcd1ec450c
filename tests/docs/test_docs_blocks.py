"""Every code block of the docs that claims to run is run by a test or says why not; the README's Python example
runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import tiny_overrides
from markdown_blocks import EXECUTED, NOT_RUN, ROOT, blocks, docs_pages

from probcl.config import load_config


def _readme_example(block) -> bool:
    """The README's Python example, which :func:`test_readme_python_example_runs` executes."""
    return block.page == "README.md" and block.language == "python"


def test_every_runnable_block_is_executed_or_says_why_not():
    unmarked = [
        f"{b.page}:{b.line} ({b.language})"
        for page in docs_pages()
        for b in blocks(page)
        if b.runnable and b.not_run is None and b.page not in EXECUTED and not _readme_example(b)
    ]
    assert not unmarked, "runnable blocks neither executed by a test nor marked <!-- not run: why -->: " + ", ".join(
        unmarked
    )


def test_executed_pages_exist_and_mark_nothing_as_not_run():
    for page, test in EXECUTED.items():
        assert (ROOT / test).is_file(), f"{page} names a missing test {test}"
        marked = [b.line for b in blocks(ROOT / page) if b.not_run]
        assert not marked, f"{page} is executed by {test}, yet lines {marked} say they are not run"


def test_the_convention_reads_the_marker_and_its_reason(tmp_path):
    page = ROOT / "docs" / "_blocks_fixture.md"  # a page under the root, as blocks() expects
    page.write_text(
        'text\n<!-- not run: needs a GPU -->\n```bash\nprobcl pretrain\n```\n\n```python title="x.py"\nx = 1\n```\n'
    )
    try:
        first, second = blocks(page)
    finally:
        page.unlink()
    assert (first.language, first.not_run, first.code) == ("bash", "needs a GPU", "probcl pretrain\n")
    assert (second.language, second.not_run, second.title, second.line) == ("python", None, "x.py", 7)
    assert NOT_RUN.match("<!-- not run:  -->") is None  # a reason is required


@pytest.mark.slow
def test_readme_python_example_runs(tmp_path, monkeypatch):
    """The README's Python example, on a tiny run where ./run.sh would have put the main job's."""
    from probcl.tasks.pretrain import pretrain

    monkeypatch.chdir(tmp_path)
    pretrain(load_config(None, tiny_overrides(Path("runs/simclr-fmnist"))))  # on digits: 28x28 gray, as FMNIST
    (example,) = [b for b in blocks(ROOT / "README.md") if b.language == "python"]
    namespace: dict = {}
    exec(compile(example.code, "README.md", "exec"), namespace)
    z = namespace["z"]
    assert z.shape == (len(namespace["images"]), 4 * 4)  # tiny CNN of width 4: 4 * width features
