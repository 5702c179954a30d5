# kept for the commands bench/results names: the body is scripts/gpu-check's decode-b1 mode
exec bash "$(dirname "$0")/gpu-check" decode-b1
