#!/usr/bin/env bash
# Publish the finished cells of a study that runs from another checkout (study v3: the worktree of branch v3-run,
# whose frozen code the cells must run; see benchmarks/study_queue.sh) into this checkout, and rebuild from them
# the reports and README blocks that summarise them:
#
#   bash benchmarks/study_publish.sh ../wt-v3 fashion-mnist/study-v3-long fashion-mnist/study-v3
#   bash benchmarks/study_publish.sh ../wt-v3 fashion-mnist/study-v3-split2-long fashion-mnist/study-v3-split2
#
# 1. in the worktree, `--report-only` copies the cells that finished there into its publish folder (cells only:
#    that checkout's report is not kept);
# 2. the cells this checkout has not published yet are copied into its publish folder (one published before is
#    kept as it is: a cell trained again, e.g. for its checkpoint on a fresh machine, gives the same numbers but
#    other timings, benchmarks/study_worktree.sh);
# 3. here, `--report-only` rebuilds the config's report from every published cell with today's report code, then
#    each further config named (those whose reports show this one as a budget), then the README's study blocks;
# 4. each claims-from-*.json in those configs' publish folders (benchmarks/claims_across_studies.py: the verdicts
#    that moved from the previous study) is recomputed from the same two results.json, so it follows the cells;
# 5. study v3's costs (benchmarks/study_cost.py: docs/results/study-v3-cost.json and docs/study.md's Costs block)
#    are recomputed from every published cell.
# Run it from this checkout's root; nothing is committed.
set -euo pipefail
(( $# >= 2 )) || { echo "study_publish.sh: give the worktree, the config, and any configs to rebuild after it" >&2; exit 2; }
worktree=$1 config=$2
shift 2
[[ -d $worktree ]] || { echo "study_publish.sh: no worktree at $worktree" >&2; exit 2; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # share the machine with the workers
here=$PWD  # this checkout's probcl, installed or not (the worktree's runs from its own root the same way)
source "$(dirname "$0")/study_lib.sh"
publish=$(publish_folder "$config")
[[ -n $publish ]] || { echo "study_publish.sh: $config has no publish folder" >&2; exit 2; }
(cd "$worktree" && python3 -m probcl.cli benchmark --config "$config" --report-only | tail -1)
mkdir -p "$publish/cells"
for cell in "$worktree/$publish/cells"/*/; do
    name=$(basename "$cell")
    [[ -e $publish/cells/$name ]] || cp -r "$cell" "$publish/cells/$name"
done
for each in "$config" "$@"; do
    python3 -m probcl.cli benchmark --config "$each" --report-only | tail -1
done
for each in "$config" "$@"; do
    for moved in "$(publish_folder "$each")"/claims-from-*.json; do
        [[ -e $moved ]] || continue
        python3 benchmarks/claims_across_studies.py --again "$moved" > /dev/null
        echo "study_publish.sh: recomputed $moved"
    done
done
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" python3 scripts/readme_study.py | tail -1
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" python3 benchmarks/study_cost.py | tail -1
