#!/usr/bin/env bash
# The megakernel's GPU session (issue 15), everything GPU-side in one go, in under 7 minutes on an
# H200: `warpy mega bench` over the issue's workloads (table, JSON, PNG under $OUT; every output
# against the fp32 reference), the mega GPU tests (every body on every SM, the hang on purpose among
# them), compute-sanitizer memcheck / racecheck / synccheck on mlp3, then a summary table. Each step
# has its own time limit, so one slow step cannot eat the session; a step that fails or runs out of
# time is said in the summary, and the rest still run. (2026-12-01: 178 s on an H200.)
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
  [ "$verdict" = ok ] && [ "$rc" = 9 ] && verdict="KERNEL ERRORS"  # (the sanitizers' --error-exitcode)
  [ "$verdict" = ok ] && [ "$rc" != 0 ] && verdict="FAILED (rc $rc)"
  SUMMARY+=("$(printf '%-22s %-16s %5ss' "$name" "$verdict" "$took")")
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
$PY -c "import torch; print('torch', torch.__version__)" || true

# the bench: every workload through warpy and torch eager / CUDA graph / compile / compile
# reduce-overhead, each output against the fp32 reference (the correctness run of the big shapes), and
# each workload once with the timeline (its report, a Chrome trace under $OUT/timeline)
step bench 280 $PY -m warpy.cli mega bench --iters 30 --compile-budget 60 --variants --json "$OUT/mega_bench.json" \
  --png "$OUT/mega_bench.png" --timeline "$OUT/timeline"

# the GPU tests: every body's graphs on every SM against the reference, PDL, the hang on purpose
# (it ends with the per-SM dump within its deadline)
step gpu-tests 240 $PY -m pytest -q tests/gpu/test_mega_gpu.py tests/gpu/test_mega_glu_gpu.py

# compute-sanitizer on mlp3 (1024 rows, one call each)
SAN=${SAN:-compute-sanitizer}
step memcheck 35 $SAN --tool memcheck --report-api-errors no --error-exitcode 9 \
  $PY -m warpy.cli mega run mlp3 --calls 1 --deadline 25
step racecheck 60 $SAN --tool racecheck --report-api-errors no --error-exitcode 9 \
  $PY -m warpy.cli mega run mlp3 --calls 1 --deadline 40
step synccheck 35 $SAN --tool synccheck --report-api-errors no --error-exitcode 9 \
  $PY -m warpy.cli mega run mlp3 --calls 1 --deadline 25

echo
echo "=== summary ($(( $(date +%s) - T0 )) s in all)"
for s in "${SUMMARY[@]}"; do echo "$s"; done
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/memcheck.log "$OUT"/racecheck.log "$OUT"/synccheck.log 2>/dev/null
$PY -c "import sys; from warpy.kernels.mega_bench import bench_table, read_rows; print(bench_table(read_rows(sys.argv[1])))" \
  "$OUT/mega_bench.json" 2>/dev/null || echo "no bench rows"
