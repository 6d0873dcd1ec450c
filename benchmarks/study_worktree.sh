#!/usr/bin/env bash
# Set up (or check) the checkout that study v3's cells run from: branch v3-run, the frozen code c41e08f with study
# v3's four config files, as a worktree beside this checkout, and copy into it the cells published here, so that
# its workers restore them instead of training them again.
#
#   bash benchmarks/study_worktree.sh ../wt-v3      # then start the workers (benchmarks/study_queue.sh's header)
#
# The branch lives only on the machine that made it; a session on a fresh machine runs this first. The commit is
# built with fixed author, dates and message, so every machine makes the same one (its hash is checked below):
# the cells' cell.json name it, whichever session recreated it. An existing worktree on another commit with the
# same files is moved to that commit without touching its files (running workers are not disturbed).
set -euo pipefail
(( $# == 1 )) || { echo "study_worktree.sh: give the worktree's path (../wt-v3)" >&2; exit 2; }
worktree=$1
base=c41e08f  # the commit that wrote study-v3-tuned.yaml: every v3 cell trains and is evaluated by its code
# the config files as the cells need them: the own method's cells (05603c0), the second split's long budget (1d5f42f)
configs=(
    05603c0:probcl/presets/fashion-mnist/study-v3.yaml
    05603c0:probcl/presets/fashion-mnist/study-v3-long.yaml
    05603c0:probcl/presets/fashion-mnist/study-v3-split2.yaml
    1d5f42f:probcl/presets/fashion-mnist/study-v3-split2-long.yaml
)
expected=bb84298b016e09bda3b8d213f34e114b95f21fb8  # the commit this script makes (same on every machine)

index=$(mktemp)
trap 'rm -f "$index"' EXIT
GIT_INDEX_FILE=$index git read-tree "$base"
for each in "${configs[@]}"; do
    GIT_INDEX_FILE=$index git update-index --add --cacheinfo "100644,$(git rev-parse "$each"),${each#*:}"
done
tree=$(GIT_INDEX_FILE=$index git write-tree)
commit=$(GIT_AUTHOR_NAME=probcl GIT_AUTHOR_EMAIL=probcl@localhost GIT_AUTHOR_DATE="2026-11-28T00:00:00+0000" \
    GIT_COMMITTER_NAME=probcl GIT_COMMITTER_EMAIL=probcl@localhost GIT_COMMITTER_DATE="2026-11-28T00:00:00+0000" \
    git commit-tree "$tree" -p "$(git rev-parse "$base^{commit}")" \
    -m "v3-run: the frozen code $base with study v3's config files (benchmarks/study_worktree.sh)")
[[ $commit == "$expected" ]] || { echo "study_worktree.sh: made $commit, expected $expected" >&2; exit 1; }

if [[ -d $worktree ]]; then
    [[ $(git -C "$worktree" rev-parse 'HEAD^{tree}') == "$tree" ]] \
        || { echo "study_worktree.sh: $worktree holds other files than v3-run; move it away and run this again" >&2; exit 1; }
    git -C "$worktree" reset -q --soft "$commit"  # same files: only the commit's name changes
else
    git worktree add -q -B v3-run "$worktree" "$commit"
fi
source "$(dirname "$0")/study_lib.sh"
for config in study-v3-long study-v3-split2-long; do
    publish=$(publish_folder "fashion-mnist/$config")
    if [[ -d $publish/cells ]]; then
        mkdir -p "$worktree/$publish/cells"
        cp -r "$publish/cells/." "$worktree/$publish/cells/"
    fi
done
echo "study_worktree.sh: $worktree is at $(git -C "$worktree" rev-parse --short HEAD) (v3-run), with the published cells"
