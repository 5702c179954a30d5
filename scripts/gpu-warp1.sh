# session 33: one-warp split blocks for batch-1 decode attention (probe at 8k and 32k), then their GPU tests
site=/tmp/tilers-site; rm -rf $site
python3 -m pip install -q --no-deps --no-index --target $site target/wheels/tilers-*.whl || exit 1
export PYTHONPATH=$site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
PROBE_CONFIGS="$(cat scripts/probe-configs/one-warp-8k.json)" timeout 220 python3 scripts/decode-attn-probe.py 2>&1 | grep -v Warn | tee $OUT/probe-8k.log
PROBE_S=32768 PROBE_CONFIGS="$(cat scripts/probe-configs/one-warp-32k.json)" timeout 120 python3 scripts/decode-attn-probe.py 2>&1 | grep -v Warn | tee $OUT/probe-32k.log
timeout 180 python3 -m pytest -q -p no:cacheprovider tests/test_flash_decoding_gpu.py -k "one_warp or combine_threads" 2>&1 | tail -5 | tee $OUT/gpu-tests.log
