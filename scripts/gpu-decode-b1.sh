# session 33: bench/decode.py batch-1 attention rows with the one-warp split blocks in the space
site=/tmp/tilers-site; rm -rf $site
python3 -m pip install -q --no-deps --no-index --target $site target/wheels/tilers-*.whl || exit 1
export PYTHONPATH=$site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
OUT=$OUT DECODE_PART=attention DECODE_BATCHES=${BATCHES:-1} DECODE_KV=${KV:-8192,32768} DECODE_SPLITS=${SPLITS:-16,32} \
  DECODE_BLOCK_N=64 DECODE_BLOCK_H=16 DECODE_STAGES=3 DECODE_COMBINE=kernel DECODE_VERBOSE=1 \
  timeout ${LIMIT:-420} python3 bench/decode.py 2>&1 | grep -v Warn | tee $OUT/decode-attention.log
