#!/usr/bin/env bash
# Export the example's kernels, build them and main.cpp with the system compilers, and run it
# (a machine with an NVIDIA GPU and the CUDA runtime's header and library: CUDA_HOME).
#   examples/cpp/run.sh [BUILD_DIR] [--dump DIR]
# The same build with CMake: examples/cpp/CMakeLists.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(mkdir -p "${1:-$here/build}" && cd "${1:-$here/build}" && pwd)
shift $(( $# > 0 ? 1 : 0 ))
if [ -z "${CUDA_HOME:-}" ]; then  # where nvcc is, else the usual place
  nvcc=$(command -v nvcc || true)
  CUDA_HOME=$([ -n "$nvcc" ] && dirname "$(dirname "$(readlink -f "$nvcc")")" || echo /usr/local/cuda)
fi
"${PYTHON:-python3}" "$here/export_kernels.py" "$build/kernels" --arch "${ARCH:-sm_90a}"
cd "$build"
# the exported launchers are C11 and need only libdl and libpthread (libcuda is opened at run time)
for f in kernels/tilers_*.c; do
  gcc -std=c11 -O2 -Wall -Wextra -Werror -c "$f" -o "$(basename "${f%.c}").o"
done
g++ -std=c++17 -O2 -Wall -Wextra -Werror -I kernels -I "$CUDA_HOME/include" "$here/main.cpp" \
  tilers_*.o -L "$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcudart -ldl -lpthread \
  -o tilers_example
./tilers_example "$@"
