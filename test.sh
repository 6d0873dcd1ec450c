#!/usr/bin/env bash
# Set up and run the checks: ruff (lint + format), mypy on the package, the import-linter layer contracts, then the test suite (pytest, CPU;
# no network needed beyond the package registries).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
echo "==> ruff (lint + format), mypy, and the layer contracts (import-linter)"
python3 -m ruff check probcl tests benchmarks scripts
python3 -m ruff format --check probcl tests benchmarks scripts
python3 -m mypy probcl
lint-imports
echo "==> pytest"
python3 -m pytest -q "$@"
