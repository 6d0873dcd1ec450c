#!/usr/bin/env bash
# Set up and run the test suite (CPU, no network needed beyond the package registries).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
python3 -m pytest -q "$@"
