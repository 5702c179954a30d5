# Every GPU test file (but those named in SKIP_FILES) in its own process, four at a time on
# the one GPU (correctness only: no timing test runs here), each under its own timeout and all
# under TOTAL seconds; per-file logs and a summary under $OUT.
site=/tmp/tilers-site; rm -rf $site
python3 -m pip install -q --no-deps --no-index --target $site target/wheels/tilers-*.whl || exit 1
export PYTHONPATH=$site PYTHONUNBUFFERED=1 OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
ls tests/test_*gpu*.py | grep -v -E "${SKIP_FILES:-^$}" > $OUT/files.txt
timeout ${TOTAL:-520} xargs -P 4 -I{} sh -c 'timeout 400 python3 -m pytest -q -p no:cacheprovider {} > $OUT/$(basename {} .py).log 2>&1; echo "{} rc=$?" >> $OUT/summary.txt' < $OUT/files.txt
sort $OUT/summary.txt; for f in $OUT/test_*.log; do echo "== $f: $(tail -1 $f)"; done
