#!/usr/bin/env bash
# Install everything probcl needs on a fresh Debian/Ubuntu machine: the Fashion-MNIST data package
# (apt, when missing) and the Python package with its dependencies (pip, into the current Python), at the
# versions of requirements/lock.txt: the ones the published figures were measured with (torch 2.14.1).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${PROBCL_DATA:-}" ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if command -v apt-get >/dev/null 2>&1; then
    echo "==> installing Debian's dataset-fashion-mnist"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    echo "warning: no apt-get; set PROBCL_DATA to a folder with the Fashion-MNIST idx files, or use --download" >&2
  fi
fi

PYTHON=${PYTHON:-python3}
echo "==> installing probcl and its dependencies with pip (pinned by requirements/lock.txt)"
"$PYTHON" -m pip install -q --disable-pip-version-check -c requirements/lock.txt -e ".[dev]" 2>&1 | grep -v -E "^WARNING: (Location|Running pip)" || true
"$PYTHON" -c "import probcl, torch, torchvision, lightning, kornia" \
  || { echo "error: the Python dependencies did not install; see pip's output above" >&2; exit 1; }
