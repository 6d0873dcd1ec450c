"""Where `probcl pretrain`'s start-up goes: the imports it cannot avoid against its own set-up.

    python benchmarks/startup.py [--repeats 5] [--out docs/results/perf/startup.json]

Each figure is the best of ``--repeats`` fresh processes (imports are cached by the OS after the first, as they are
for a user's second command), counted from the process's start as the kernel records it (as `probcl pretrain`'s own
start-up line counts; the interpreter's exit is not counted): the interpreter alone; ``import torch``; ``import
torch`` then ``lightning.pytorch`` (which imports torchmetrics, whose image metrics import torchvision, whose ops
import torch._dynamo); everything ``probcl pretrain`` imports; and `probcl pretrain`'s own clock from process start
to its first optimiser step (the line it prints), on the FMNIST preset with the monitor off. The difference between
the last two is probcl's set-up (config, data, model, Trainer); the rest is the import floor.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
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


CLOCK = "\nfrom probcl.core.process_clock import seconds_since_process_start\nprint(seconds_since_process_start())"


def import_seconds(code: str, repeats: int) -> float:
    """Best, over ``repeats`` fresh processes, of the seconds from the process's start to the end of ``code``
    (the kernel's start time, as `probcl pretrain`'s own clock counts; the interpreter's exit is not counted)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    runs = [
        subprocess.run([sys.executable, "-c", code + CLOCK], check=True, env=env, cwd=ROOT, capture_output=True)
        for _ in range(repeats)
    ]
    return round(min(float(run.stdout.split()[-1]) for run in runs), 2)


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
