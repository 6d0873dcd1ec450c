"""The model half of ``probcl score``, exported once per run so that repeat calls need no model class.

:meth:`IdReference.model_output_fns <probcl.eval.id_reference.IdReference.model_output_fns>` names what
the scores need from the model (features, the declared capabilities' outputs) and ``probcl score`` adds
the online probe's logits. :func:`export_outputs` turns those functions into one ``torch.export``
program with a dynamic batch dimension, checked against the eager model on real images;
:func:`load_outputs` reads it back with nothing but PyTorch. Loading a run's method instead imports
PyTorch Lightning, torchmetrics and torchvision: ~3 of the ~7 CPU-seconds of a repeat call on 2 cores.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from probcl.core.io import atomic_write

OutputFns = dict[str, Callable[[torch.Tensor], torch.Tensor]]
TOLERANCE = 1e-4  # max |exported - eager| / (1 + max |eager|) accepted for every output
# torch.export's note when it saves or loads a weight that is not contiguous in the default layout (the
# backbone's channels_last convolutions) whole: "may cause issues when your weights are not on CPU". These
# programs run on the CPU only (a GPU device scores with the model), so the note never applies.
NOT_CONTIGUOUS_NOTE = "No complete tensor found"


@contextmanager
def _without_layout_note() -> Iterator[None]:
    """Silence :data:`NOT_CONTIGUOUS_NOTE` (and nothing else) inside the ``with`` block."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=NOT_CONTIGUOUS_NOTE, category=UserWarning)
        yield


class ModelOutputs(nn.Module):
    """uint8 images -> one float32 tensor per named output function of ``owner`` (its parameters)."""

    def __init__(self, owner: nn.Module, fns: OutputFns) -> None:
        super().__init__()
        self.owner = owner  # registered, so that export lifts its parameters and buffers
        self.fns = fns
        self.names = list(fns)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.fns[name](images).float() for name in self.names)


class ExportedOutputs:
    """A loaded program: uint8 images -> ``{name: float32 tensor}`` on the CPU."""

    def __init__(self, program: nn.Module, names: list[str]) -> None:
        self.program, self.names = program, names

    @torch.no_grad()
    def __call__(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        return dict(zip(self.names, self.program(images)))


def export_outputs(owner: nn.Module, fns: OutputFns, images: torch.Tensor, path: Path) -> list[str]:
    """Export ``fns`` of the CPU model ``owner`` to ``path`` (atomically) and return the output names.

    ``images`` (a real uint8 batch of >= 2 images) trace the program and check it: every output must
    match the eager model's within :data:`TOLERANCE` at the full batch and at a batch of one, else
    ``RuntimeError`` (the caller keeps the model path).
    """
    if len(images) < 2:
        raise RuntimeError("exporting the scoring network needs a batch of at least 2 images")
    module = ModelOutputs(owner, fns).eval()
    batch = torch.export.Dim("batch", min=1)
    with torch.no_grad():
        program = torch.export.export(module, (images,), dynamic_shapes=({0: batch},))
        for sample in (images, images[:1]):
            expected, got = module(sample), program.module()(sample)
            for name, e, g in zip(module.names, expected, got):
                error = float((e - g).abs().max()) / (1.0 + float(e.abs().max()))
                if e.shape != g.shape or not error <= TOLERANCE:
                    raise RuntimeError(f"exported {name} differs from the model (relative error {error:.2g})")
    with _without_layout_note():
        atomic_write(path, lambda fh: torch.export.save(program, fh))
    return module.names


def load_outputs(path: Path, names: list[str]) -> ExportedOutputs:
    """The program :func:`export_outputs` wrote to ``path``."""
    with _without_layout_note():
        program = torch.export.load(path)
    return ExportedOutputs(program.module(), names)
