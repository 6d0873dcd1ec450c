#!/usr/bin/env bash
# Run a benchmark's cells on a lent machine (one GPU, many host cores) with several `probcl benchmark`
# workers sharing one output folder, until a deadline; then copy the published cells and the logs to --out.
#
#   bash benchmarks/device_cells.sh --config fashion-mnist/study-v3-tuning-trials --workers 12 \
#        --seconds 420 --out "$OUT" [--drop-published] [--seeds 0,1,2]
#
# --seconds is the whole script's wall time: workers stop 80 s before it (SIGTERM: each saves its cell's checkpoint;
# SIGKILL 20 s later), which leaves the time to pack the cells and write the report within it.
# Workers claim cells (see probcl/tasks/benchmark/run.py), so no cell runs twice; a worker stopped at the
# deadline saves its cell's checkpoint and the cell is simply not published. --drop-published removes the
# published copy on this machine first, so every cell trains here (one hardware for all of them) instead of
# being restored. --seeds trains only those seeds' cells (`probcl benchmark --seeds`: a grid split between
# machines by seed, so that the cells a paired comparison reads run on one kind of hardware). Needs: the data
# where probcl finds it ($PROBCL_DATA, default ./data if present) and, when the image lacks them, wheels of the missing packages in ./.whl (installed with --no-deps to /tmp/site).
set -euo pipefail

config="" workers=8 seconds=420 out="" drop=0 seeds=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --config) config="$2"; shift 2 ;;
        --workers) workers="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --drop-published) drop=1; shift ;;
        --seeds) seeds=(--seeds "$2"); shift 2 ;;
        *) echo "device_cells.sh: unknown argument $1 (see the header for usage)" >&2; exit 2 ;;
    esac
done
[[ -n "$config" && -n "$out" ]] || { echo "device_cells.sh: --config and --out are required" >&2; exit 2; }

if [[ -d .whl ]] && ! python3 -c "import kornia" 2>/dev/null; then
    pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
[[ -d data ]] && export PROBCL_DATA="${PROBCL_DATA:-$PWD/data}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

publish=$(python3 -c "
from probcl.tasks.benchmark.grid import load_benchmark
b, _ = load_benchmark('$config'); print(b.publish or '')")
bench_out=$(python3 -c "
from probcl.tasks.benchmark.grid import load_benchmark
b, _ = load_benchmark('$config'); print(b.out)")
[[ -n "$publish" ]] || { echo "device_cells.sh: $config has no publish folder to copy back" >&2; exit 2; }
if (( drop )); then rm -rf "$publish/cells" "$publish/results.json"; fi

mkdir -p "$out/logs"
{ nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv -l 15 > "$out/gpu.csv" 2>&1 || true; } &
monitor=$!
start=$(date +%s)
pids=()
(( seconds > 120 )) || { echo "device_cells.sh: --seconds must exceed 120 (80 of them are kept for the end)" >&2; exit 2; }
for i in $(seq 1 "$workers"); do
    timeout --signal=TERM --kill-after=20 "$((seconds - 80 - 2 * i))" \
        python3 -m probcl.cli benchmark --config "$config" "${seeds[@]}" --no-report > "$out/logs/worker-$i.log" 2>&1 &
    pids+=($!)
    sleep 2  # staggered, so the first cells are claimed one by one
done
for p in "${pids[@]}"; do wait "$p" || true; done
kill "$monitor" 2>/dev/null || true
# every cell's small files as the workers left them (checkpoints excluded): what comes back even if the report fails
tar -C "$bench_out" --exclude=checkpoints -czf "$out/cells.tgz" cells 2>/dev/null || true
timeout 40 python3 -m probcl.cli benchmark --config "$config" --report-only > "$out/logs/report.log" 2>&1 || true
end=$(date +%s)

mkdir -p "$out/published"
cp -r "$publish"/. "$out/published/"
n=$( (find "$out/published/cells" -name cell.json 2>/dev/null || true) | wc -l)
python3 - "$out/device-cells.json" "$config" "$workers" "$((end - start))" "$n" <<'EOF'
import json, sys, platform, torch
path, config, workers, seconds, cells = sys.argv[1:]
json.dump({"config": config, "workers": int(workers), "wall_seconds": int(seconds), "published_cells": int(cells),
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
           "torch": torch.__version__, "host": platform.processor() or platform.machine()},
          open(path, "w"), indent=2)
EOF
echo "device_cells.sh: $n published cells of $config in $((end - start)) s with $workers workers (out: $bench_out)"
