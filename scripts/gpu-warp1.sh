# kept for the commands bench/results names: the body is scripts/gpu-check's warp1 mode
exec bash "$(dirname "$0")/gpu-check" warp1
