#!/usr/bin/env bash
# One background worker that runs several benchmark configs one after the other (each resumable, cells claimed, so
# several such workers share the work and none runs a cell twice): when a config has no cell left to claim, the
# worker moves on to the next, instead of idling while the other workers finish their last cells.
#
#   cd ../wt-v3 && OMP_NUM_THREADS=1 setsid nohup nice -n 10 bash ../main/benchmarks/study_queue.sh \
#       fashion-mnist/study-v3-long fashion-mnist/study-v3-split2-long > ../wt-v3-queue-1.log 2>&1 &
#
# Run it in the checkout whose code the cells must run (study v3: the worktree of branch v3-run, which
# `bash benchmarks/study_worktree.sh ../wt-v3` sets up on a fresh machine); start a second
# one 20 s later. No report is written (--no-report): publish with `probcl benchmark --config C --report-only`.
set -uo pipefail
(( $# > 0 )) || { echo "study_queue.sh: name one or more benchmark configs (see the header)" >&2; exit 2; }
status=0
for config in "$@"; do
    echo "study_queue.sh: $(date -u +%FT%TZ) starting $config"
    python3 -m probcl.cli benchmark --config "$config" --no-report || status=$?  # a failed cell: go on, say so
done
exit "$status"
