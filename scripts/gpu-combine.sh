# kept for the commands bench/results names: the body is scripts/gpu-check's combine mode
exec bash "$(dirname "$0")/gpu-check" combine
