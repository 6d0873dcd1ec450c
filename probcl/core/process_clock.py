"""How long this process has been running: the clock of ``probcl pretrain``'s start-up figure (process start to the
first optimiser step), which counts the interpreter's start and every import, not only probcl's own code."""

from __future__ import annotations

import os
import time
from pathlib import Path

_FIRST_SEEN = time.perf_counter()  # when this module was first imported: the fallback start


def seconds_since_process_start(proc: Path = Path("/proc")) -> float:
    """Seconds since the kernel started this process (Linux: ``/proc/self/stat``'s start time against
    ``/proc/uptime``, at the kernel's clock-tick resolution, 10 ms); elsewhere, since this module was imported."""
    try:
        stat = (proc / "self" / "stat").read_text()
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22 (starttime); fields after ")" begin at 3
        uptime = float((proc / "uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _FIRST_SEEN
