"""`probcl sample` asks the run for the EnergyModel capability and explains itself when it is missing."""

from probcl.cli import main
from probcl.core.layout import RunPaths
from probcl.tasks.pretrain import pretrain
from probcl.tasks.sample import energy_model_methods


def test_sample_on_a_run_without_an_energy_model_is_one_clear_line(tiny_config, capsys):
    run = pretrain(tiny_config("simclr", **{"train.limit_train_batches": 1, "train.monitor_every_n_epochs": 0}))
    capsys.readouterr()
    assert main(["sample", str(run), "--steps", "1", "--num", "2", "--reference", "4"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "probcl: config error: method 'simclr' has no energy model to sample from; "
        "`probcl sample` needs a run of: ebclr\n"
    )
    assert not (RunPaths(run).plots / "samples.png").exists()
    assert energy_model_methods() == ["ebclr"]
