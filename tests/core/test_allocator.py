"""The CLI's allocator settings (probcl.core.allocator): a model run batch after batch in inference stops faulting in
fresh pages for its activations; a user's own allocator settings are left alone. Counts page faults, not time."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from probcl.core import allocator

FORWARD_PASSES = """
import contextlib, io, resource, sys
import torch
from probcl.core.allocator import reuse_freed_memory
if sys.argv[1] == "cli":  # what `probcl ...` does before any command
    from probcl.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        main(["list"])
print(reuse_freed_memory() if sys.argv[1] == "call" else "-")
torch.manual_seed(0)
net = torch.nn.Sequential(
    torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
    torch.nn.Conv2d(32, 64, 3, padding=1, stride=2), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
    torch.nn.Conv2d(64, 128, 3, padding=1, stride=2), torch.nn.BatchNorm2d(128), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
).eval()
x = torch.randn(128, 1, 28, 28)
with torch.no_grad():
    for _ in range(3):
        net(x)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        net(x)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

glibc = pytest.mark.skipif(
    not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"), reason="the settings are glibc's"
)


def _page_faults(mode: str, **env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if k not in allocator.USER_SETTINGS}
    out = subprocess.run(
        [sys.executable, "-c", FORWARD_PASSES, mode], capture_output=True, text=True, check=True, env={**clean, **env}
    ).stdout.split()
    return out[0], int(out[1])


MMAPPED_BLOCKS = """
import ctypes, sys
from probcl.core.allocator import reuse_freed_memory
FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype, libc.malloc.restype = MallInfo2, ctypes.c_void_p
if sys.argv[1] == "call":
    reuse_freed_memory()
before = libc.mallinfo2().hblks
block = libc.malloc(8 << 20)
print(libc.mallinfo2().hblks - before)
libc.free(ctypes.c_void_p(block))
"""


@glibc
def test_an_8_mib_block_comes_from_the_heap_not_a_fresh_mapping():
    """glibc's mallinfo2 counts the blocks served by mmap: one for 8 MiB by default (threshold 128 KiB), none after
    reuse_freed_memory (threshold 32 MiB)."""
    clean = {k: v for k, v in os.environ.items() if k not in allocator.USER_SETTINGS}
    mapped = {
        mode: subprocess.run(
            [sys.executable, "-c", MMAPPED_BLOCKS, mode], capture_output=True, text=True, check=True, env=clean
        ).stdout.strip()
        for mode in ("none", "call")
    }
    assert mapped == {"none": "1", "call": "0"}


@glibc
def test_inference_batches_do_not_fault_in_fresh_pages():
    """20 forward passes of a small CNN on 128 images: with glibc's defaults they may fault in ~11,000 fresh pages a
    batch (how many depends on how its adaptive threshold has moved); with the CLI's settings almost none."""
    called, tuned = _page_faults("call")
    _, through_the_cli = _page_faults("cli")
    assert called == "True"
    assert tuned < 11_000 and through_the_cli < 11_000  # less than one batch's worth over 20 batches


@glibc
def test_a_users_own_allocator_settings_are_kept():
    called, _ = _page_faults("call", MALLOC_TOP_PAD_="0")
    assert called == "False"
