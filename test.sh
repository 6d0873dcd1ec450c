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
lint-imports
echo "==> docs (mkdocs build --strict)"
NO_MKDOCS_2_WARNING=1 python3 -m mkdocs build --strict --quiet
echo "==> pytest"
python3 -m pytest -q "$@"
