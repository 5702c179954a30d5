# session 33: one-warp split blocks for batch-1 decode attention (probe at 8k and 32k; the
# example of 9d7721f beside, from old/ when present), then their GPU tests
site=/tmp/tilers-site; rm -rf $site
python3 -m pip install -q --no-deps --no-index --target $site target/wheels/tilers-*.whl || exit 1
export PYTHONPATH=$site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
base='[{"num_split": 16, "block_N": 64, "num_stages": 3, "threads": 128}, {"num_split": 64, "block_N": 32, "num_stages": 2, "threads": 32}]'
for round in 1 2; do
  [ -d old ] && PROBE_EXAMPLES=old PROBE_CONFIGS="$base" timeout 60 python3 scripts/decode-attn-probe.py 2>&1 | grep -v Warn | sed 's/^/old /' | tee -a $OUT/probe-8k.log
  [ $round = 1 ] && cfgs="$(cat scripts/probe-configs/one-warp-8k.json)" || cfgs="$base"
  PROBE_CONFIGS="$cfgs" timeout 200 python3 scripts/decode-attn-probe.py 2>&1 | grep -v Warn | tee -a $OUT/probe-8k.log
done
PROBE_S=32768 PROBE_CONFIGS="$(cat scripts/probe-configs/one-warp-32k.json)" timeout 100 python3 scripts/decode-attn-probe.py 2>&1 | grep -v Warn | tee $OUT/probe-32k.log
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_flash_decoding_gpu.py -k "one_warp or combine_threads or (test_against_torch and 16)" 2>&1 | tail -5 | tee $OUT/gpu-tests.log
