"""Every command module declares the protocol `probcl.cli` reads (probcl/commands/__init__.py), so the CLI asks a
declared attribute instead of probing for one (what to do after a stop included);
only `pretrain` takes `--section.key VALUE` config overrides."""

from __future__ import annotations

import pytest

from probcl.cli import build_parser, main

PARSER, COMMANDS = build_parser()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_declares_name_help_overrides_and_entry_points(name):
    module = COMMANDS[name]
    assert module.NAME == name and isinstance(module.HELP, str) and module.HELP
    assert isinstance(module.ACCEPTS_OVERRIDES, bool)
    assert isinstance(module.AFTER_A_STOP, str) and module.AFTER_A_STOP.startswith(("run", "re-run"))
    assert callable(module.add_arguments) and callable(module.run)


def test_only_pretrain_takes_overrides():
    assert sorted(name for name, module in COMMANDS.items() if module.ACCEPTS_OVERRIDES) == ["pretrain"]


def test_a_command_without_overrides_rejects_stray_tokens(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["list", "methods", "--optim.lr", "0.1"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --optim.lr 0.1" in capsys.readouterr().err
