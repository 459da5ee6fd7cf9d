#!/bin/bash
# The twenty-fourth session's last device call: the final code (final24) -- the whole GPU suite,
# engine and nccl one-rank tests, then issue 3's grouped case with B [K, N] (--layout nn; kosmos::Gemm
# merges tails there) and with B [N, K] (the default layout), merged / not alternated.
#   run(command="scripts/call24d.sh", carry=["build/variants/final24"])
set -u
start=$(date +%s)
el() { echo "($(($(date +%s) - start)) s)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
g=$(grep -q H200 $OUT/gpu.txt && echo h200 || echo h100)
timeout 360 scripts/variants.sh tests final24 > $OUT/tests.txt 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr -s ' ' | tr '\n' ';') $(el)"
grep -E "FAILED|Failure" $OUT/tests.txt | head -10
[ -f $OUT/results.tgz ] && mv $OUT/results.tgz $OUT/tests-logs.tgz
B=$(scripts/variants.sh unpack final24 gemm_engine_bench) || exit 1
for l in nn nt; do
  timeout 100 "$B" --grouped-only --layout $l --json $OUT/gemm-engine-grouped-$l-$g-24th.json > $OUT/grouped-$l.txt 2>&1
  echo "grouped $l rc=$? $(el)"; tail -9 $OUT/grouped-$l.txt
done
