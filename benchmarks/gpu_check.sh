#!/usr/bin/env bash
# One prepared accelerator check (docs/speed.md): the bound and `probcl pretrain`'s rate for the main job's CNN and
# for ResNet-18 on CIFAR-sized images (synthetic: nothing to download), deterministic on and off, the per-step
# profile and the loop's overhead per step. <= 8 minutes on one GPU. Arguments go to benchmarks/gpu_check.py:
#   bash benchmarks/gpu_check.sh                                   # a GPU: writes benchmarks/results/gpu-check/
#   bash benchmarks/gpu_check.sh --device cpu --tiny --out DIR     # the CPU path at tiny sizes (a test runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PROBCL_NO_PROGRESS=1
exec "${PYTHON:-python3}" benchmarks/gpu_check.py "$@"
