"""The generated references: every option has a description, the tables say what the fields declare, and the
CLI reference lists the sub-commands' arguments (hand-checked cases, not the generator's own output)."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest
from markdown_blocks import ROOT

from scripts.docs_reference import (
    cli_reference,
    comments_by_field,
    config_reference,
    field_description,
    options_table,
    undescribed_fields,
)

MODULE = """
from dataclasses import dataclass
from typing import Annotated

from probcl.config import AtLeast


@dataclass
class Base:
    plain: int = 1  # a trailing comment
    wrapped: Annotated[int | None, AtLeast(1)] = (
        None  # ruff moved this comment inside the parentheses
    )
    # a block of comments
    # right above the field
    above: float = 0.5
    bare: str = "x"

    def method(self) -> None:  # not a field
        pass


@dataclass
class Child(Base):
    extra: bool = False  # declared by the child
"""


@pytest.fixture
def hand_module(tmp_path):
    path = tmp_path / "hand_written_params.py"
    path.write_text(MODULE)
    spec = importlib.util.spec_from_file_location("hand_written_params", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module.__name__] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[module.__name__]


def test_every_config_key_method_param_and_suite_option_has_a_description():
    assert undescribed_fields() == [], "add a # comment on each of these fields' lines"


def test_comments_are_read_from_each_fields_own_lines(hand_module):
    assert comments_by_field(hand_module.__file__, "Base") == {
        "plain": "a trailing comment",
        "wrapped": "ruff moved this comment inside the parentheses",
        "above": "a block of comments right above the field",
        "bare": "",
    }
    assert field_description(hand_module.Child, "plain") == "a trailing comment"  # found where it is declared
    assert field_description(hand_module.Child, "extra") == "declared by the child"


def test_a_table_row_shows_type_default_and_bounds(hand_module):
    rows = options_table(hand_module.Child, "x.").splitlines()
    assert rows[3] == "| `x.wrapped` | int \\| null | null | >= 1 | ruff moved this comment inside the parentheses |"
    assert rows[5] == "| `x.bare` | str | `x` |  |  |"
    assert rows[6] == "| `x.extra` | bool | false |  | declared by the child |"


def test_configuration_reference_has_the_declared_fields():
    text = config_reference()
    assert "| `optim.lr` | float | `0.001` | > 0 | peak learning rate (after warm-up) |" in text
    assert "| `train.batch_size` | int | `256` | >= 2 |" in text
    assert "| `augment.normalize` | `dataset` \\| `symmetric` | `dataset` |" in text
    # EBCLR's nested sampler settings are expanded with their dotted keys
    assert "| `method_args.sgld.step_size` | float | `0.05` | > 0 | alpha |" in text
    for section in ("## `data`", "## `augment`", "## `model`", "## `optim`", "## `train`", "### `c-byol`"):
        assert section in text


def test_cli_reference_lists_each_sub_command_and_hides_retired_spellings():
    text = cli_reference()
    for command in ("benchmark", "evaluate", "export", "list", "pretrain", "sample", "score"):
        assert f"## `probcl {command}`" in text
    evaluate = text.split("## `probcl evaluate`")[1].split("## `probcl ")[0]
    assert "`--inference-batch-size`" in evaluate and "`--batch-size`" not in evaluate  # retired, help=SUPPRESS
    pretrain = text.split("## `probcl pretrain`")[1].split("## `probcl ")[0]
    assert "`--no-resume`" in pretrain and "`--section.key VALUE`" in pretrain


def test_hook_replaces_marker_lines_and_refuses_unknown_ones():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = types.SimpleNamespace(file=types.SimpleNamespace(src_uri="x.md"))
    out = hooks.on_page_markdown("# T\n\n<!-- generated: method-args simclr -->\n", page, None, None)
    assert "| `temperature` | float | `0.5` | > 0 |" in out and "generated:" not in out
    with pytest.raises(ValueError, match="unknown generated block"):
        hooks.on_page_markdown("<!-- generated: no-such-block -->\n", page, None, None)
