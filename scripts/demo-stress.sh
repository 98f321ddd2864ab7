#!/usr/bin/env bash
# Runs `sublinear demo` at several budgets and planners, a few runs at a time, and reports
# which ones ran out of memory or met pressure the plan did not foresee (pressure: the
# valve's calls; kept: planned evictions the allocator could not give pages of their own;
# status "lifted": a plan made with the cache scaled to the budget ran out of room and fell
# back, Note [Scaled cache allowance] in policy/planning_overhead.hpp). This is the
# reproduction behind docs/runtime.md, "Budget arithmetic": a margin that is one page too
# tight shows up here as a run that fails, far more often than in one run on an idle
# machine, because runs side by side shift the stream's timing.
#
#   scripts/demo-stress.sh                      budgets 0.4x-0.65x, reforward and chen, 3 at a time
#   JOBS=2 BUDGETS="0.5x 0.6x" POLICIES=greedy scripts/demo-stress.sh --model transformer
#
# Extra arguments go to every `sublinear demo`. Uses build/bin/sublinear as built by
# scripts/demo.sh or scripts/test.sh, or the program DEMO_STRESS_BIN names (to compare
# builds). Exit status 1 if any run failed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${DEMO_STRESS_BIN:-$root/build/bin/sublinear}"
if [[ ! -x "$bin" ]]; then
  echo "demo-stress: $bin is missing; build it first with scripts/demo.sh --help" >&2
  exit 2
fi
budgets=${BUDGETS:-"0.4x 0.45x 0.5x 0.55x 0.6x 0.65x"}
policies=${POLICIES:-"reforward chen"}
jobs=${JOBS:-3}
if ! [[ "$jobs" =~ ^[1-9][0-9]*$ ]]; then
  echo "demo-stress: JOBS must be a positive integer, not '$jobs'" >&2
  exit 2
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/demo-stress.XXXXXX")
run() {  # policy budget
  SUBLINEAR_LOG=info "$bin" demo --budget "$2" --policy "$1" "${@:3}" >"$out/$1-$2.log" 2>&1
  echo $? >"$out/$1-$2.rc"
}
for p in $policies; do
  for b in $budgets; do
    run "$p" "$b" "$@" &
    while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
  done
done
wait
failed=0
printf '%-10s %-7s %-10s %-9s %-5s %s\n' policy budget status pressure kept "time against the baseline"
for p in $policies; do
  for b in $budgets; do
    log="$out/$p-$b.log"
    rc=$(cat "$out/$p-$b.rc")
    pressure=$(grep -c "pressure at launch" "$log")
    scaled=$(grep -c "planning with the allocator's cache scaled" "$log")
    kept=$(grep -c "kept resident in a shared segment" "$log")
    ratio=$(grep "against the baseline time" "$log" | awk '{print $NF}')
    if grep -q "ran out of room at launch" "$log"; then
      status=lifted
    elif grep -q "is infeasible" "$log"; then
      status=infeasible
    elif [[ "$rc" == 0 ]]; then
      status=ok
    else
      status="failed($rc)"
      failed=1
    fi
    if [[ "$status" == ok && "$scaled" -gt 0 ]]; then status=ok-scaled; fi
    printf '%-10s %-7s %-10s %-9s %-5s %s\n' "$p" "$b" "$status" "$pressure" "$kept" "${ratio:--}"
    if [[ "$rc" != 0 ]]; then grep -m1 "out of memory\|error" "$log" | cut -c1-300; fi
  done
done
echo "logs: $out"
exit "$failed"
