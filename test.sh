#!/usr/bin/env bash
# Set up and run the checks: ruff (lint + format), mypy on the package and the benchmark scripts, the import-linter
# layer contracts, the docs build (mkdocs build --strict: broken links, missing pages, stale generated references),
# then the test suite (pytest, CPU; no network needed beyond the package registries).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
echo "==> ruff (lint + format), mypy, and the layer contracts (import-linter)"
python3 -m ruff check probcl tests benchmarks scripts
python3 -m ruff format --check probcl tests benchmarks scripts
python3 -m mypy probcl benchmarks
# import-linter's report in full only when a contract fails; otherwise one line
if ! contracts=$(lint-imports --no-logo 2>&1); then
    echo "$contracts"
    exit 1
fi
echo "$contracts" | sed -n 's/^Contracts: \([0-9]*\) kept.*$/layer contracts (import-linter): all \1 hold/p'
echo "==> docs (mkdocs build --strict)"
NO_MKDOCS_2_WARNING=1 python3 -m mkdocs build --strict --quiet
# pytest-xdist: one test file per process (--dist loadfile keeps a file's module fixtures built once), up to 4
# processes, the CPU's cores shared among them (OMP_NUM_THREADS, unless set); PROBCL_TEST_WORKERS=1 runs one process
cores=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
workers=${PROBCL_TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( cores / workers > 0 ? cores / workers : 1 ))}
echo "==> pytest ($workers processes of $OMP_NUM_THREADS threads)"
if (( workers > 1 )); then
    python3 -m pytest -q -n "$workers" --dist loadfile "$@"
else
    python3 -m pytest -q "$@"
fi
