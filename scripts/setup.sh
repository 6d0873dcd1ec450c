#!/usr/bin/env bash
# Install everything probcl needs on a fresh Debian/Ubuntu machine: the Fashion-MNIST data package
# (apt, when missing) and the Python package with its dependencies (pip, into the current Python), at the
# versions of requirements/lock.txt: the ones the published figures were measured with (torch 2.14.1).
#
#   PYTHON=python3.12   the Python to install into (default: python3; a virtual environment's when one is active)
#   PROBCL_TORCH=cpu    PyTorch's CPU-only wheels (Linux; same versions, from $PROBCL_TORCH_CPU_INDEX) instead of
#                       the default build, whose CUDA libraries add ~4 GB (docs/getting-started.md, "Install size")
#   PROBCL_DATA=DIR     Fashion-MNIST's idx files are in DIR: no apt step
#
# Installing the data package needs root: as root, or with sudo that needs no password (or a terminal to ask
# for it). Otherwise this says how to get the data and goes on: the digits dataset and your own image folders
# need nothing installed.
set -euo pipefail
cd "$(dirname "$0")/.."

FASHION_MNIST=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
if [ ! -f "$FASHION_MNIST" ] && [ -z "${PROBCL_DATA:-}" ]; then
  ELSE="or set PROBCL_DATA to a folder with the Fashion-MNIST idx files (probcl's --download fetches them there)"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "warning: Fashion-MNIST is not installed and this system has no apt-get; $ELSE" >&2
    AS=none
  elif [ "$(id -u)" -eq 0 ]; then
    AS=""
  elif command -v sudo >/dev/null 2>&1 && { sudo -n true 2>/dev/null || [ -t 0 ]; }; then
    AS="sudo"
  else
    echo "warning: Fashion-MNIST is not installed, and installing Debian's dataset-fashion-mnist needs root" \
      "(this user is not root and cannot sudo here): ask an administrator to run" \
      "'apt-get install dataset-fashion-mnist', $ELSE. Going on without it." >&2
    AS=none
  fi
  if [ "$AS" != none ]; then
    echo "==> installing Debian's dataset-fashion-mnist${AS:+ (with sudo)}"
    $AS apt-get update -qq
    $AS env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null
  fi
fi

PYTHON=${PYTHON:-python3}
PIP=("$PYTHON" -m pip install -q --disable-pip-version-check)
quiet() { grep -v -E "^WARNING: (Location|Running pip)" || true; }

case "${PROBCL_TORCH:-}" in
  "") ;;
  cpu)
    if [ "$(uname -s)" = Linux ]; then
      INDEX=${PROBCL_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
      # the lock's torch and torchvision, as PyTorch's CPU-only builds (version +cpu: no CUDA libraries, no triton)
      PINS=$(sed -n -E 's/^(torch|torchvision)==([^ ]+).*/\1==\2+cpu/p' requirements/lock.txt)
      echo "==> installing PyTorch's CPU-only wheels ($(echo $PINS)) from $INDEX"
      "${PIP[@]}" --no-deps --index-url "$INDEX" $PINS 2>&1 | quiet \
        || { echo "error: PyTorch's CPU-only wheels did not install from $INDEX (reachable? see pip's output)" >&2; exit 1; }
    else
      echo "==> PROBCL_TORCH=cpu: nothing to change on $(uname -s) (PyTorch's wheels there have no CUDA)"
    fi
    ;;
  *)
    echo "error: PROBCL_TORCH=$PROBCL_TORCH: set it to cpu (PyTorch's CPU-only wheels) or leave it unset" >&2
    exit 2
    ;;
esac

echo "==> installing probcl and its dependencies with pip (pinned by requirements/lock.txt)"
"${PIP[@]}" -c requirements/lock.txt -e ".[dev]" 2>&1 | quiet || true  # judged by the imports below
"$PYTHON" -c "import probcl, torch, torchvision, lightning, kornia" \
  || { echo "error: the Python dependencies did not install; see pip's output above" >&2; exit 1; }
if [ "${PROBCL_TORCH:-}" = cpu ] && [ "$(uname -s)" = Linux ]; then
  "$PYTHON" -c "import sys, torch; sys.exit(torch.version.cuda is not None)" \
    || { echo "error: PROBCL_TORCH=cpu, but the torch installed is a CUDA build: its CPU-only wheel did not" \
      "replace it (see pip's output above)" >&2; exit 1; }
fi
