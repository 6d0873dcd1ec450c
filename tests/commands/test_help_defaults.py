"""Every `probcl <command> --help` shows each option's default (issue #29, finding 8: `sample --steps` and `--num`
had none)."""

from __future__ import annotations

import argparse

import pytest

from probcl.cli import build_parser

PARSER, COMMANDS = build_parser()
SUBPARSERS = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction)).choices


def flat(text: str) -> str:
    return " ".join(text.split())  # argparse wraps help text at the terminal width


def option_helps(command: str) -> dict[str, str]:
    """Each option's rendered --help text, by its last flag; flags without a value and required options (argparse's
    usage line marks them) left out."""
    formatter = SUBPARSERS[command]._get_formatter()
    return {
        action.option_strings[-1]: flat(formatter._expand_help(action))
        for action in SUBPARSERS[command]._actions
        if action.option_strings and action.help != argparse.SUPPRESS and action.nargs != 0 and not action.required
    }


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_shows_its_default(command):
    missing = {
        flag: text
        for flag, text in option_helps(command).items()
        if "default" not in text and "required" not in text and "repeatable" not in text
    }
    assert not missing, f"probcl {command} --help: options without a default: {missing}"


@pytest.mark.parametrize(
    "command, flag, expected",
    [
        ("sample", "--steps", "SGLD steps (default: 200)"),
        ("sample", "--num", "number of samples (default: 64)"),
        ("sample", "--start", "(default: noise)"),
        ("score", "--knn-k", "(default: 1)"),
        ("score", "--ood-threshold-tpr", "(default: 0.95)"),
        ("evaluate", "--suite", "(default: linear,knn)"),
        ("evaluate", "--inference-batch-size", "(default: 128)"),
        ("evaluate", "--model.width", "(default: the weights' .json sidecar's, else 32)"),
        ("evaluate", "--max-train", "(default: all of them)"),
        ("sample", "--step-size", "(default: the run's)"),  # said in the text: not repeated
    ],
)
def test_the_default_is_the_value_the_option_takes(command, flag, expected):
    text = option_helps(command)[flag]
    assert text.endswith(expected) and text.count("default") == 1


def test_pretrain_help_says_where_presets_and_your_own_configs_are_found():
    text = flat(SUBPARSERS["pretrain"].format_help())
    assert "probcl/presets/<dataset>/<name>.yaml" in text and "./configs/" in text


@pytest.mark.parametrize(
    "command, flag, field",
    [
        ("sample", "--num", "num"),
        ("sample", "--steps", "steps"),
        ("sample", "--start", "start"),
        ("sample", "--reference", "reference_size"),
        ("sample", "--seed", "seed"),
        ("evaluate", "--inference-batch-size", "batch_size"),
        ("evaluate", "--seed", "seed"),
    ],
)
def test_the_default_named_in_help_is_the_settings_default(command, flag, field):
    """A flag that falls back to a settings dataclass names that dataclass's default, not a copy that drifts."""
    from probcl.tasks.evaluate import EvaluateSettings
    from probcl.tasks.sample import SampleOptions

    settings = {"sample": SampleOptions, "evaluate": EvaluateSettings}[command]
    assert option_helps(command)[flag].endswith(f"(default: {getattr(settings, field)})")
