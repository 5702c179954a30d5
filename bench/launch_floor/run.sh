#!/usr/bin/env bash
# On the GPU machine (nvcc there): the driver's and runtime's own launch cost, no Python.
set -euo pipefail
here=$(dirname "$0")
out=${OUT:-/tmp}
nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o "$out/floor" "$here/floor.cu" -lcuda
nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -o "$out/floor.cubin" "$here/floor.cu"
"$out/floor" "$out/floor.cubin"
