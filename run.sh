#!/usr/bin/env bash
# The main job: set up, pretrain SimCLR on Fashion-MNIST with the CPU preset, evaluate linear + kNN,
# and compare with a linear probe on raw pixels. Re-running resumes/reuses the finished run.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
RUN=${RUN:-runs/simclr-fmnist}
start=$(date +%s)
probcl pretrain --config fashion-mnist/simclr --run-dir "$RUN" "$@"
probcl evaluate "$RUN" --suite linear,knn
probcl evaluate "$RUN" --suite linear --features pixels
python3 - "$RUN" "$start" <<'PY'
import json, sys, time
run, start = sys.argv[1], int(sys.argv[2])
r = json.load(open(f"{run}/eval.json"))
print(f"\nSimCLR on Fashion-MNIST ({run}), test accuracy:")
print(f"  linear probe on SimCLR features : {r['linear']['top1']:.2f} %")
print(f"  weighted kNN (k=200, T=0.1)      : {r['knn']['top1']:.2f} %")
print(f"  linear probe on raw pixels       : {r['linear@pixels']['top1']:.2f} %")
print(f"  wall time (train + evaluate)     : {time.time() - start:.0f} s")
PY
