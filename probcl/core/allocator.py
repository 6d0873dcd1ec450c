"""The C allocator's settings for a probcl process: freed tensor memory is reused, not handed back to the OS.

PyTorch on the CPU allocates every intermediate tensor with ``malloc``. glibc's defaults serve a large block
(above a threshold that starts at 128 KiB) with a fresh ``mmap`` and return it with ``munmap`` when freed, and give
memory at the top of the heap back to the OS once 128 KiB of it is free: so a model run batch after batch in
inference (no autograd graph keeping tensors alive) touches new pages for its activations on every batch, one page
fault per 4 KiB. Extracting Fashion-MNIST features at 128 images a batch took 2.38 million minor page faults and
6.7 s for 60,000 images, against 0.10 million and 4.0 s with the settings below (AMD EPYC, 2 cores, 2026-11-28;
``docs/speed.md``); training, whose tensors live through the backward pass, runs at the same speed either way.

:func:`reuse_freed_memory` sets glibc's thresholds: blocks below 32 MiB come from the heap, and up to 1 GiB of freed
memory at its top is kept for the next batch. The process then holds on to memory it used at its peak instead of
returning it at once. The CLI calls it at start; a program that imports probcl keeps its own allocator settings.
It does nothing where the C library is not glibc, or where the user has chosen (``MALLOC_*`` or
``GLIBC_TUNABLES`` in the environment, or another allocator preloaded, e.g. jemalloc or tcmalloc).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

MMAP_THRESHOLD = 32 << 20  # bytes: glibc's largest allowed value on 64-bit systems
TRIM_THRESHOLD = 1 << 30  # bytes of free memory at the heap's top kept for reuse
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES", "LD_PRELOAD")


def reuse_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (see the module doc); True when they were set."""
    try:
        libc_name = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):  # not a POSIX system, or no GNU libc
        return False
    if not libc_name.startswith("glibc"):
        return False
    if any(os.environ.get(name) for name in USER_SETTINGS):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
