#!/usr/bin/env bash
# The megakernel's GPU session (issue 15), everything GPU-side in one go, in under 7 minutes on an
# H200: correctness runs of the issue's workloads, `warpy mega bench` (table, JSON, PNG under $OUT),
# compute-sanitizer memcheck / racecheck / synccheck on mlp3, the mega GPU tests (the hang on purpose
# among them), then a summary table. Each step has its own time limit, so one slow step cannot eat
# the session; a step that fails or runs out of time is said in the summary, and the rest still run.
#
#     bash tests/gpu/mega_session.sh            (from the repository root; OUT defaults to ./mega-out)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/mega-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PY:-python3}
SUMMARY=()
T0=$(date +%s)

step() {  # step NAME SECONDS COMMAND...: run it under a limit, its output also to $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  local t=$(date +%s)
  echo "=== $name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  local took=$(( $(date +%s) - t ))
  local verdict=ok
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && verdict="TIMED OUT"
  [ "$verdict" = ok ] && [ "$rc" != 0 ] && verdict="FAILED (rc $rc)"
  SUMMARY+=("$(printf '%-22s %-16s %5ss' "$name" "$verdict" "$took")")
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
$PY -c "import torch; print('torch', torch.__version__)" || true

# correctness on every SM: mlp3 at 1024 rows and 1 row, llama-mlp at T=16 (three calls each, the
# counters carried over; every output element against the reference)
step run-mlp3-1024 60 $PY -m warpy.cli mega run mlp3 --tokens 1024 --calls 3
step run-mlp3-1 40 $PY -m warpy.cli mega run mlp3 --tokens 1 --calls 3
step run-llama-16 80 $PY -m warpy.cli mega run llama-mlp --tokens 16 --calls 2

# the bench: every workload, warpy against torch eager / CUDA graph / compile / compile reduce-overhead
step bench 170 $PY -m warpy.cli mega bench --iters 30 --compile-budget 70 --json "$OUT/mega_bench.json" \
  --png "$OUT/mega_bench.png"

# compute-sanitizer on mlp3 (one call each; racecheck at 128 rows: it instruments every shared access)
SAN=${SAN:-compute-sanitizer}
step memcheck 45 $SAN --tool memcheck --report-api-errors no --error-exitcode 9 \
  $PY -m warpy.cli mega run mlp3 --calls 1 --deadline 30
step racecheck 60 $SAN --tool racecheck --report-api-errors no --error-exitcode 9 \
  $PY -m warpy.cli mega run mlp3 --tokens 128 --calls 1 --deadline 50
step synccheck 45 $SAN --tool synccheck --report-api-errors no --error-exitcode 9 \
  $PY -m warpy.cli mega run mlp3 --calls 1 --deadline 30

# the GPU tests (the hang on purpose ends with the per-SM dump within its deadline)
step gpu-tests 110 $PY -m pytest -q -x tests/gpu/test_mega_gpu.py

echo
echo "=== summary ($(( $(date +%s) - T0 )) s in all)"
for s in "${SUMMARY[@]}"; do echo "$s"; done
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/memcheck.log "$OUT"/racecheck.log "$OUT"/synccheck.log 2>/dev/null
$PY -c "import sys; from warpy.kernels.mega_bench import bench_table, read_rows; print(bench_table(read_rows(sys.argv[1])))" \
  "$OUT/mega_bench.json" 2>/dev/null || echo "no bench rows"
