#!/usr/bin/env bash
# Make onnxruntime-gpu provide the `onnxruntime` module in a venv (piper-tts pulls the CPU
# package, and whichever of the two was installed last owns the module files).
# Usage: tools/install-gpu.sh PYTHON [--dry-run]
#   CUDA_MAJOR=12|13   the CUDA major in use (default: 13 with a driver >= 580, else 12)
#   JETSON_INDEX=URL   aarch64 (Jetson): the JetPack wheel index (PyPI has no aarch64
#                      onnxruntime-gpu), e.g. the Jetson AI Lab index for JetPack 6
set -euo pipefail
python="${1:?usage: install-gpu.sh PYTHON [--dry-run]}"
dry=0; [ "${2:-}" = "--dry-run" ] && dry=1
run() { if [ "$dry" = 1 ]; then echo "+ $*"; else "$@"; fi; }
arch="${ARCH:-$(uname -m)}"
if [ "$arch" = "aarch64" ]; then
    if [ -z "${JETSON_INDEX:-}" ]; then
        echo "aarch64: PyPI has no onnxruntime-gpu. On a Jetson set JETSON_INDEX to the" >&2
        echo "JetPack wheel index (TensorRT comes with JetPack) and run this again." >&2
        exit 2
    fi
    run "$python" -m pip install -q --index-url "$JETSON_INDEX" onnxruntime-gpu
    spec="onnxruntime-gpu"
    index=(--index-url "$JETSON_INDEX")
else
    major="${CUDA_MAJOR:-}"
    if [ -z "$major" ]; then
        driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
        major=12
        if [ -n "$driver" ] && [ "${driver%%.*}" -ge 580 ]; then major=13; fi
    fi
    # PyPI onnxruntime-gpu >= 1.27 is built for CUDA 13; 1.26.0 is the last CUDA 12 build.
    if [ "$major" = 12 ]; then spec="onnxruntime-gpu==1.26.0"; else spec="onnxruntime-gpu>=1.27,<2"; fi
    index=()
    run "$python" -m pip install -q "${spec/onnxruntime-gpu/onnxruntime-gpu[cuda,cudnn]}"
fi
# Last, without dependencies: now onnxruntime-gpu owns the module files.
run "$python" -m pip install -q --force-reinstall --no-deps "${index[@]}" "$spec"
run "$python" -c 'import onnxruntime as o, sys; p = o.get_available_providers(); print(p); sys.exit(0 if "CUDAExecutionProvider" in p else "onnxruntime does not offer CUDA")'
