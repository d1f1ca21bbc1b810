#!/usr/bin/env bash
# Installs what minidp needs from Debian's packages, skipping what is already there, and provisions the Python
# interpreter the tests and scripts run (cmake/MinidpPython.cmake): MINIDP_PYTHON where it is set, else
# /usr/bin/python3, which Debian's python3-numpy and python3-torch serve; what it still lacks of numpy, torch
# and safetensors (the PyTorch interop check) comes from PyPI. Runs apt-get as root, or through sudo.
set -euo pipefail

packages=(build-essential cmake libeigen3-dev libgtest-dev libcli11-dev nlohmann-json3-dev libopenmpi-dev
          openmpi-bin zlib1g-dev dataset-fashion-mnist fortunes python3-torch python3-numpy python3-pip
          python3-matplotlib)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
python=${MINIDP_PYTHON:-/usr/bin/python3}
modules=()
for m in numpy torch safetensors; do
  "$python" -c "import $m" 2>/dev/null || modules+=("$m")
done
if [ ${#modules[@]} -gt 0 ]; then
  echo "install-deps: installing ${modules[*]} for $python (pip)"
  "$python" -m pip install -q "${modules[@]}" 2>/dev/null ||
    "$python" -m pip install -q --break-system-packages "${modules[@]}"
fi
if command -v nvidia-smi >/dev/null && ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps: a GPU is present but no CUDA compiler: install nvidia-cuda-toolkit and libnccl-dev (non-free)" >&2
fi
