"""``train.precision: auto``: bf16 mixed precision where a CPU computes bf16 natively, 32-bit elsewhere.

On CUDA ``auto`` keeps float32 even where the GPU has native bf16
(``torch.cuda.is_bf16_supported(including_emulation=False)``, Ampere and newer): measured on an H200, bf16
autocast did not pay for this library's presets (:data:`CUDA_FP32_REASON`). A CPU computes bf16 natively with
AVX512-BF16 or AMX (Intel Cooper Lake / Sapphire Rapids and newer, AMD Zen 4 and newer), or an Arm CPU
with the BF16 extension. On other CPUs bf16 is emulated: slower than float32 and less accurate, so
``auto`` keeps 32-bit there. The facts come from torch's cpuinfo checks (``torch.cpu._is_avx512_bf16_supported``,
``torch.cpu._is_amx_tile_supported``) and the kernel's CPU flags (``/proc/cpuinfo``); oneDNN's own
``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` is not used, as it also holds for plain AVX-512 (emulated bf16).

:func:`choose_precision` is the decision on given facts (tested with facts injected);
:func:`hardware_facts` reads them from this machine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from probcl.core.names import AUTO, BF16, FP32

# CPU flags (as /proc/cpuinfo spells them) that mean native bf16 matrix instructions; amx_tile is what torch's
# cpuinfo check reports for AMX, whose every implementation so far includes AMX-BF16.
NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile", "bf16")
_BF16_PRECISIONS = ("bf16-mixed", "bf16", "bf16-true")
# On CUDA, auto keeps float32 (cuDNN computes its convolutions in TF32 on Ampere and newer): on an H200 bf16 autocast
# ran the Fashion-MNIST CNN at 0.72-0.89x and ResNet-18 at 0.82-1.16x of float32's best rate (docs/speed.md).
CUDA_FP32_REASON = (
    "the GPU has native bf16, but bf16 autocast measured 0.72-0.89x of float32's rate for the small CNN and "
    "0.82-1.16x for ResNet-18 on an H200; --precision bf16-mixed to try it on yours"
)


@dataclass(frozen=True)
class HardwareFacts:
    """What the precision decision looks at: the device type training runs on and what it computes natively."""

    device: str  # "cuda", "cpu", or another accelerator's name
    cuda_bf16: bool = False  # the GPU has native bf16 (not emulated)
    cpu_capability: str = ""  # torch.backends.cpu.get_cpu_capability(): DEFAULT, AVX2, AVX512, ...
    cpu_flags: frozenset[str] = frozenset()  # the bf16-relevant flags of NATIVE_BF16_CPU_FLAGS the CPU has


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision a run uses, what was asked for, and why (printed at start-up, kept in the checkpoint)."""

    requested: str
    precision: str  # a Lightning precision string
    reason: str

    @property
    def bf16(self) -> bool:
        return self.precision in _BF16_PRECISIONS

    def line(self) -> str:
        """The start-up line: ``precision auto -> 32-true (CPU AVX2: ...)``."""
        head = self.precision if self.requested == self.precision else f"{self.requested} -> {self.precision}"
        return f"precision {head} ({self.reason})"


def choose_precision(requested: str, facts: HardwareFacts) -> PrecisionChoice:
    """``requested`` as given, unless it is ``auto``: then bf16-mixed where ``facts`` show a CPU with native bf16,
    else 32-true; the reason names the deciding fact."""
    if requested != AUTO:
        return PrecisionChoice(requested, requested, "set in the config")
    if facts.device == "cuda":
        if facts.cuda_bf16:  # measured, not assumed: docs/speed.md "On a GPU", three H200 runs
            return PrecisionChoice(AUTO, FP32, CUDA_FP32_REASON)
        return PrecisionChoice(AUTO, FP32, "the GPU has no native bf16 (pre-Ampere)")
    if facts.device != "cpu":
        return PrecisionChoice(AUTO, FP32, f"no bf16 check for accelerator {facts.device}")
    native = [flag for flag in NATIVE_BF16_CPU_FLAGS if flag in facts.cpu_flags]
    capability = f"CPU capability {facts.cpu_capability or 'unknown'}"
    if native:
        return PrecisionChoice(AUTO, BF16, f"{capability} with {'+'.join(native)}: native bf16")
    return PrecisionChoice(AUTO, FP32, f"{capability}, no AVX512-BF16/AMX: bf16 would be emulated")


def cpu_bf16_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The flags of :data:`NATIVE_BF16_CPU_FLAGS` this CPU has, by torch's cpuinfo checks or the kernel's list."""
    found = set()
    if torch.cpu._is_avx512_bf16_supported():
        found.add("avx512_bf16")
    if torch.cpu._is_amx_tile_supported():
        found.add("amx_tile")
    with contextlib.suppress(OSError):
        for line in cpuinfo.read_text().splitlines():
            if line.startswith(("flags", "Features")):  # x86, arm64
                found.update(set(line.split(":", 1)[1].split()) & set(NATIVE_BF16_CPU_FLAGS))
                break
    return frozenset(found)


def device_type(accelerator: str | torch.device) -> str:
    """The device type a run's ``train.accelerator`` (or an evaluation's device) computes on."""
    if isinstance(accelerator, torch.device):
        return accelerator.type
    if accelerator == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if accelerator == "gpu" else accelerator.split(":")[0]


def hardware_facts(accelerator: str | torch.device) -> HardwareFacts:
    """The facts of this machine for ``accelerator`` (auto, cpu, gpu, cuda or a torch.device)."""
    device = device_type(accelerator)
    cuda = device == "cuda" and torch.cuda.is_available()
    cuda_bf16 = cuda and torch.cuda.is_bf16_supported(including_emulation=False)
    return HardwareFacts(device, cuda_bf16, torch.backends.cpu.get_cpu_capability(), cpu_bf16_flags())


def resolve_precision(requested: str, accelerator: str | torch.device) -> PrecisionChoice:
    """:func:`choose_precision` on this machine's facts."""
    return choose_precision(requested, hardware_facts(accelerator) if requested == AUTO else HardwareFacts(""))


@contextlib.contextmanager
def compute_precision(choice: PrecisionChoice, device: torch.device) -> Iterator[None]:
    """Run the enclosed inference in the chosen precision: bf16 autocast for a bf16 choice, as training ran."""
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=choice.bf16):
        yield


@contextlib.contextmanager
def float32(device: torch.device | str) -> Iterator[None]:
    """No autocast inside: the enclosed code (samplers, vMF densities) computes in the dtype of its inputs,
    which callers make at least float32 with :func:`at_least_float32`."""
    with torch.autocast(torch.device(device).type, enabled=False):
        yield


def at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 when it is in a narrower float type (bf16, fp16); float32 and float64 stay as they are
    (energies and vMF log-densities reach tens to hundreds of nats, which half precision rounds by whole nats)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))
