#!/usr/bin/env bash
# Set up and run the checks: ruff (lint + format), mypy on the package, then the test suite (pytest, CPU;
# no network needed beyond the package registries).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
echo "==> ruff (lint + format) and mypy"
python3 -m ruff check probcl tests benchmarks scripts
python3 -m ruff format --check probcl tests benchmarks scripts
python3 -m mypy probcl
echo "==> pytest"
python3 -m pytest -q "$@"
