"""Where `probcl pretrain`'s start-up goes: the imports it cannot avoid against its own set-up.

    python benchmarks/startup.py [--repeats 5] [--out docs/results/perf/startup.json]

Each figure is the best of ``--repeats`` fresh processes (imports are cached by the OS after the first, as
they are for a user's second command): the interpreter alone; ``import torch``; ``import torch`` then
``lightning.pytorch`` (which imports torchmetrics, whose image metrics import torchvision, whose ops import
torch._dynamo); everything ``probcl pretrain`` imports; and `probcl pretrain`'s own clock from process start
to its first optimiser step (the line it prints), on the FMNIST preset with the monitor off. The difference
between the last two is probcl's set-up (config, data, model, Trainer); the rest is the import floor.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from throughput import ROOT, cli_run

IMPORTS = {
    "python": "pass",
    "torch": "import torch",
    "torch + lightning.pytorch": "import torch, lightning.pytorch",
    "torch + torch._dynamo (imported by torchvision.ops)": "import torch, torch._dynamo",
    "everything probcl pretrain imports": "import probcl.tasks.pretrain, probcl.cli",
}


def import_seconds(code: str, repeats: int) -> float:
    """Best wall time of ``python -c code`` over ``repeats`` fresh processes."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)
        best = min(best, time.perf_counter() - start)
    return round(best, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="fashion-mnist/simclr")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    result: dict = {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "imports_seconds": {name: import_seconds(code, args.repeats) for name, code in IMPORTS.items()},
    }
    runs = [cli_run(args.config, 3, torch.get_num_threads(), None) for _ in range(args.repeats)]
    result["cli_startup_seconds"] = min(run.startup_seconds for run in runs)
    result["cli_startup_note"] = "probcl pretrain: process start to its first optimiser step (best of the runs)"
    everything = result["imports_seconds"]["everything probcl pretrain imports"]
    result["probcl_setup_seconds"] = round(result["cli_startup_seconds"] - everything, 2)
    for name, seconds in result["imports_seconds"].items():
        print(f"{name:55s} {seconds:5.2f} s")
    print(f"{'probcl pretrain: process start to first step':55s} {result['cli_startup_seconds']:5.2f} s")
    print(f"{'  of which probcl set-up after its imports':55s} {result['probcl_setup_seconds']:5.2f} s")
    if args.out:
        from probcl.core.io import atomic_write_json

        atomic_write_json(Path(args.out), result)


if __name__ == "__main__":
    main()
