# session 33: the combine over 32 of the head's dims a block (one warp, shuffles only) against
# the whole head a block, at batch 1 / 8k (probe, two rounds), its GPU tests, then the bench row
site=/tmp/tilers-site; rm -rf $site
python3 -m pip install -q --no-deps --no-index --target $site target/wheels/tilers-*.whl || exit 1
export PYTHONPATH=$site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
for round in ${ROUNDS:-1 2}; do
  PROBE_CONFIGS="$(cat scripts/probe-configs/combine-dims-8k.json)" timeout 70 python3 scripts/decode-attn-probe.py 2>&1 | grep -v -i Warn | tee -a $OUT/probe-8k.log
done
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_flash_decoding_gpu.py -k "combine_threads" 2>&1 | tail -3 | tee $OUT/gpu-tests.log
OUT=$OUT DECODE_PART=attention DECODE_BATCHES=1 DECODE_KV=8192 DECODE_SPLITS=16 DECODE_BLOCK_N=64 DECODE_BLOCK_H=16 \
  DECODE_STAGES=3 DECODE_COMBINE=kernel DECODE_VERBOSE=1 timeout 100 python3 bench/decode.py 2>&1 | grep -v -i Warn > $OUT/decode-attention.log
grep "^attention" $OUT/decode-attention.log
