"""``--init``: any method's backbone (and its momentum copies) starts from a run or a weights file."""

import torch
from lightning.pytorch.callbacks import Callback

import probcl
from probcl.tasks.export import export_backbone
from probcl.tasks.pretrain import pretrain


class FirstState(Callback):
    """Copies the model's state when training starts, before any optimiser step."""

    state: dict = {}

    def on_train_start(self, trainer, pl_module) -> None:
        self.state = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}


def test_init_from_a_run_and_from_exported_weights(tiny_config):
    source = pretrain(tiny_config("simclr", run_name="source"))
    pretrained = probcl.load(source).backbone.state_dict()
    weights = export_backbone(source)
    for init in (str(source), str(weights)):
        seen = FirstState()
        pretrain(tiny_config("byol", run_name=f"byol-{len(init)}", init=init), callbacks=[seen])
        for name, value in pretrained.items():
            assert torch.equal(seen.state[f"backbone.{name}"], value), name
            assert torch.equal(seen.state[f"target_backbone.{name}"], value), name  # the EMA target too
