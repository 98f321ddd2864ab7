#!/usr/bin/env bash
# Runs the GPU suite (docs/gpu-suite.md) on a machine with an NVIDIA GPU and writes ONE
# results JSON: each part passed, failed or skipped with its reason, and its figures.
#
#   scripts/gpu-suite.sh [--quick] [--skip-build] [--build-dir DIR] [--parts LIST] [RESULTS.json]
#
#   RESULTS.json  default: $OUT/gpu-suite.json when $OUT is set, else <build dir>/gpu-suite.json
#   --quick       smaller models and fewer repetitions (about half the time)
#   --skip-build  use the build directory as it is (for instance the stripped binaries that
#                 scripts/gpu-bundle.sh prepares on a machine with the build dependencies)
#   --build-dir   default: build-gpu/ in the repository
#   --parts LIST  the parts to run, e.g. 1,2,3,4 or 5 (default: all); the others are skipped
#   --dry-run     no GPU, no build: part 5's scripts on the CPU with tiny models (CPU torch in
#                 $PYTHON; GPU_SUITE_MODELS picks models, default all); writes RESULTS.json only
#   PYTHON=...    the Python whose torch part 4 uses (default: python3 on PATH)
#
# Parts: 1 CUDA VMM conformance + VMM call costs, 2 CUPTI tracer on hand-written kernels,
# 3 cuDNN/cuBLAS ResNet with and without a budget, 4 PyTorch end to end (when torch is
# installed: the GPU machine has no network), 5 real training stacks (GPT-2 124M eager and
# compiled, ResNet-50 bf16 channels-last, DDP over NCCL; docs/gpu-suite.md). With --quick
# parts 1-4 take about 200 s and part 5 about 330 s on an H200 (GPU_SUITE_DEADLINE_S cuts
# what does not fit). Besides RESULTS.json the results are kept as
# docs/gpu-results/<date>-<gpu>.json in the tree (and under $OUT/gpu-results/ when $OUT is set).
# Without a GPU it says so, writes the JSON with every part skipped and exits 1.
# Exit status: 0 when no part failed, 1 otherwise, 2 on a usage error.
set -uo pipefail
SUBLINEAR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SUBLINEAR_ROOT
source "$SUBLINEAR_ROOT/scripts/lib/deps.sh"

quick=0
skip_build=0
build="$SUBLINEAR_ROOT/build-gpu"
results=""
parts="1,2,3,4,5"
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --parts) shift; parts="${1:?--parts needs a list such as 1,2,3,4}" ;;
    --parts=*) parts="${1#--parts=}" ;;
    --quick) quick=1 ;;
    --skip-build) skip_build=1 ;;
    --build-dir) shift; build="$(realpath -m "${1:?--build-dir needs a directory}")" ;;
    --build-dir=*) build="$(realpath -m "${1#--build-dir=}")" ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    -*) echo "scripts/gpu-suite.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) results="$(realpath -m "$1")" ;;
  esac
  shift
done
if [ -z "$results" ]; then
  if [ -n "${OUT:-}" ]; then results="$OUT/gpu-suite.json"; else results="$build/gpu-suite.json"; fi
fi

if [ "$dry_run" = 1 ]; then parts=5; skip_build=1; fi
case ",$parts," in *[!1-5,]*) echo "scripts/gpu-suite.sh: --parts takes part numbers 1-5, e.g. 1,2,3,4 (got '$parts')" >&2; exit 2 ;; esac
want() { case ",$parts," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

started=$(date +%s)
# The device tool stops a command at 10 minutes; GPU_SUITE_DEADLINE_S shortens the suite to fit.
deadline=$((started + ${GPU_SUITE_DEADLINE_S:-540}))
python="${PYTHON:-python3}"
work="$build/gpu-suite"
rm -rf "$work"
mkdir -p "$work" "$(dirname "$results")"
quick_flag=()
[ "$quick" = 1 ] && quick_flag=(--quick)
say() { echo "== gpu-suite: $*"; }

dry_flag=()
[ "$dry_run" = 1 ] && dry_flag=(--dry-run)
collect() {
  "$python" "$SUBLINEAR_ROOT/tests/gpu/collect_results.py" --workdir "$work" --out "$results" \
    --device "${device:-}" --parts "$parts" "${quick_flag[@]}" "${dry_flag[@]}" "$@"
}

if ! command -v "$python" >/dev/null 2>&1; then
  echo "scripts/gpu-suite.sh: $python is needed to write the results (set PYTHON=...)" >&2
  printf '{"suite": "sublinear GPU suite", "status": "failed", "reason": "no python3 to run the suite"}\n' >"$results"
  exit 1
fi

# ---- is there a GPU? (the driver itself, not nvidia-smi, which may be absent) ----------------
if [ "$dry_run" = 1 ]; then
  device="a dry run on the CPU (no GPU used)"
else
device="$("$python" - <<'PY'
import ctypes, sys
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print(f"no CUDA driver: libcuda.so.1 cannot be loaded ({e})"); sys.exit(1)
r = cu.cuInit(0)
if r != 0:
    print(f"no CUDA driver: cuInit(0) failed with CUresult {r}"); sys.exit(1)
n = ctypes.c_int(0)
if cu.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value == 0:
    print("no CUDA device: the driver reports none"); sys.exit(1)
name = ctypes.create_string_buffer(256)
cu.cuDeviceGetName(name, 256, 0)
v = ctypes.c_int(0)
cu.cuDriverGetVersion(ctypes.byref(v))
print(f"{name.value.decode()} ({n.value} device(s), driver API {v.value // 1000}.{v.value % 1000 // 10})")
PY
)"
if [ $? -ne 0 ]; then
  say "NO GPU on this machine: $device"
  say "every part is skipped; run this script on a machine with an NVIDIA GPU (see docs/gpu-suite.md)"
  collect --skip-all "$device"
  say "results: $results"
  exit 1
fi
fi
say "device: $device"

# ---- the CUDA libraries the binaries link, when the loader cannot find them ------------------
# (on the lent GPU machines cuDNN lives in PyTorch's site-packages and the toolkit's libraries
# under /usr/local/cuda-*/targets; ldconfig knows neither)
extra_libs=""
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libcupti.so.13; do
  ldconfig -p 2>/dev/null | grep -q "$lib" && continue
  found="$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)"
  [ -n "$found" ] && case ":$extra_libs:" in *":$(dirname "$found"):"*) ;; *) extra_libs="$extra_libs:$(dirname "$found")" ;; esac
done
if [ -n "$extra_libs" ]; then
  export LD_LIBRARY_PATH="${extra_libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "library path: $LD_LIBRARY_PATH"
fi
# Binaries built elsewhere and carried here (scripts/gpu-bundle.sh) find libsublinear.so beside them.
[ -d "$build/lib" ] && export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# ---- build -----------------------------------------------------------------------------------
targets="test_device test_allocator test_tracer test_integrations gpu_vmm_bench test_gpu_tracer test_gpu_block_hash test_gpu_launch_kinds gpu_resnet_train test_gpu_resnet sublinear sublinear_preload sublinear_cli"
if [ "$skip_build" = 0 ]; then
  say "building $build (CUDA on; log: $work/build.log)"
  generator=()
  command -v ninja >/dev/null 2>&1 && [ ! -f "$build/CMakeCache.txt" ] && generator=(-G Ninja)
  t0=$(date +%s)
  if ! SUBLINEAR_BUILD_TARGETS="$targets" sublinear_build "$build" "${generator[@]}" -DSUBLINEAR_CUDA=ON \
      -DSUBLINEAR_BUILD_TESTS=ON -DSUBLINEAR_BUILD_BENCHMARKS=OFF -DSUBLINEAR_TORCH_PYTHON="$(command -v "$python")" \
      >"$work/build.log" 2>&1; then
    tail -40 "$work/build.log"
    collect --fail-all "the build failed: $(grep -m1 -E 'error|Error' "$work/build.log" | cut -c1-300) (log: $work/build.log)"
    say "BUILD FAILED; results: $results"
    exit 1
  fi
  say "built in $(( $(date +%s) - t0 )) s"
fi
bin="$build/bin"

# Runs one step with a time limit that keeps the whole suite inside the deadline.
#   step NAME CAP_SECONDS COMMAND...   (stdout+stderr -> NAME.log, status -> NAME.rc)
step() {
  local name=$1 cap=$2
  shift 2
  local left=$((deadline - $(date +%s) - 15))
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -le 5 ]; then
    echo 124 >"$work/$name.rc"
    echo "not run: the suite's time ran out" >"$work/$name.log"
    say "$name: skipped, out of time"
    return
  fi
  local t0=$(date +%s)
  timeout --kill-after=10 "$cap" "$@" >"$work/$name.log" 2>&1
  local rc=$?
  echo "$rc" >"$work/$name.rc"
  echo "$(( $(date +%s) - t0 ))" >"$work/$name.seconds"
  say "$name: exit status $rc in $(( $(date +%s) - t0 )) s"
}

# ---- part 1: the CUDA VMM backend ----------------------------------------------------------------
if want 1; then
step vmm_conformance 90 "$bin/test_device" --gtest_filter='*Cuda*' --gtest_output="json:$work/vmm_conformance.json"
step conformance 150 "$bin/test_allocator" --gtest_filter='*Cuda*' --gtest_output="json:$work/conformance.json"
step vmm_bench 120 sh -c "\"$bin/gpu_vmm_bench\" ${quick_flag[*]} >\"$work/vmm_bench.json\""
fi

# ---- part 2: the CUPTI tracer ------------------------------------------------------------------
if want 2; then
step tracer 120 "$bin/test_gpu_tracer" --gtest_output="json:$work/tracer.json"
step cupti 60 "$bin/test_tracer" --gtest_filter='CuptiCollector*' --gtest_output="json:$work/cupti.json"
# The engine's hashes on the GPU (Note [Hash on the device]).
step block_hash 60 "$bin/test_gpu_block_hash" --gtest_output="json:$work/block_hash.json"
# The process runtime (engine fed by CUPTI, replay through cuLaunchKernel) and the preload.
step runtime 90 "$bin/test_integrations" --gtest_filter='ProcessRuntimeOnGpu.*:Preload*:CApi*' \
  --gtest_output="json:$work/runtime.json"
fi

# ---- part 3: cuDNN + cuBLAS ResNet with and without a budget ---------------------------------------
if want 3; then
mkdir -p "$work/resnet"
step resnet 240 env GPU_SUITE_ARTIFACTS="$work/resnet" GPU_SUITE_QUICK="$quick" \
  "$bin/test_gpu_resnet" --gtest_output="json:$work/resnet.json"
fi

# ---- part 4a: the LibTorch helper (include/sublinear/torch.hpp) through its example -----------------
# Built only when $python has torch (its wheel carries LibTorch); plain and budgeted runs must
# end with the same parameter checksum.
if want 4 && cmake --build "$build" --target sublinear_torch_example >>"$work/build.log" 2>&1 &&
    [ -x "$bin/sublinear_torch_example" ]; then
  step libtorch_plain 120 sh -c "\"$bin/sublinear_torch_example\" --plain >\"$work/libtorch_plain.out\""
  step libtorch_sublinear 120 sh -c "\"$bin/sublinear_torch_example\" --budget 0.5x >\"$work/libtorch_sublinear.out\""
  "$python" - "$work" <<'PY'
import json, sys
from pathlib import Path
work = Path(sys.argv[1])
def run(name):
    rc = int((work / f"{name}.rc").read_text().strip() or 1) if (work / f"{name}.rc").exists() else 1
    lines = (work / f"{name}.out").read_text(errors="replace").splitlines() if (work / f"{name}.out").exists() else []
    doc = next((json.loads(l) for l in reversed(lines) if l.startswith("{")), None)
    return rc, doc, lines
(prc, plain, plines), (src, sub, slines) = run("libtorch_plain"), run("libtorch_sublinear")
if 124 in (prc, src):
    out = {"status": "skipped", "reason": "the suite's time ran out"}
elif 77 in (prc, src):
    out = {"status": "skipped", "reason": " ".join(plines + slines)[:300] or "exit status 77"}
elif prc or src or plain is None or sub is None:
    out = {"status": "failed", "reason": f"exit status {prc} (plain), {src} (sublinear); see libtorch_*.log"}
else:
    same = plain["checksum"] == sub["checksum"]
    out = {"status": "passed" if same else "failed", "plain": plain, "sublinear": sub,
           "checksums_equal": same}
(work / "libtorch.json").write_text(json.dumps(out))
PY
else
  printf '{"status": "skipped", "reason": "the LibTorch example was not built: %s cannot import torch"}\n' \
    "$python" >"$work/libtorch.json"
fi

# ---- part 4: PyTorch end to end ------------------------------------------------------------------
# The package as `pip install .` would lay it out, from this build (no network needed),
# with the _version.py that the package's build writes from project(VERSION).
stage="$build/python-stage"
rm -rf "$stage"
mkdir -p "$stage/sublinear/lib" "$stage/sublinear/bin"
cp -r "$SUBLINEAR_ROOT/python/sublinear/." "$stage/sublinear/"
version="$(sed -n 's/^project(sublinear VERSION \([0-9.]*\).*/\1/p' "$SUBLINEAR_ROOT/CMakeLists.txt")"
printf '"""The package'"'"'s version, written by scripts/gpu-suite.sh from CMakeLists.txt'"'"'s project(VERSION)."""\n__version__ = "%s"\n' \
  "${version:-0+unknown}" >"$stage/sublinear/_version.py"
cp "$build/lib/libsublinear.so" "$stage/sublinear/lib/" 2>/dev/null
cp "$build/lib/libsublinear_preload.so" "$stage/sublinear/lib/" 2>/dev/null
cp "$bin/sublinear" "$stage/sublinear/bin/" 2>/dev/null
# torch_suite.py stops starting runs in time to print its JSON before the step's limit.
# Part 4 gets what is left but what part 5 needs (PART5_S, default 330 s) when both run.
part5_s=0
want 5 && part5_s=${PART5_S:-330}
torch_limit=$((deadline - $(date +%s) - 30 - part5_s))
[ "$torch_limit" -lt 1 ] && torch_limit=1
want 4 && step torch 600 sh -c "PYTHONPATH=\"$stage\${PYTHONPATH:+:\$PYTHONPATH}\" \"$python\" \
  \"$SUBLINEAR_ROOT/tests/gpu/python/torch_suite.py\" ${quick_flag[*]} --cli \"$bin/sublinear\" \
  --time-limit $torch_limit --workdir \"$work/torch\" >\"$work/torch.json\""

# ---- part 5: real training stacks ---------------------------------------------------------------
if want 5; then
  stacks_limit=$((deadline - $(date +%s) - 20))
  [ "$stacks_limit" -lt 1 ] && stacks_limit=1
  step stacks 600 sh -c "PYTHONPATH=\"$stage\${PYTHONPATH:+:\$PYTHONPATH}\" \"$python\" \
    \"$SUBLINEAR_ROOT/tests/gpu/python/real_stacks_suite.py\" ${quick_flag[*]} ${dry_flag[*]} \
    --models ${GPU_SUITE_MODELS:-gpt,resnet50,ddp,gpt_compile} --time-limit $stacks_limit \
    --workdir \"$work/stacks\" >\"$work/stacks.json\""
  [ "$dry_run" = 0 ] && step launch_kinds 60 "$bin/test_gpu_launch_kinds" --gtest_output="json:$work/launch_kinds.json"
fi


collect
rc=$?
say "finished in $(( $(date +%s) - started )) s; results: $results"
# Kept in the tree (committed by whoever ran it) and beside $OUT, which comes back from a lent machine.
if [ "$dry_run" = 0 ]; then
gpu_slug="$(printf '%s' "$device" | sed 's/ (.*//; s/^NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n' '-')"
kept="$(date -u +%Y-%m-%d)-${gpu_slug:-gpu}.json"
mkdir -p "$SUBLINEAR_ROOT/docs/gpu-results" && cp "$results" "$SUBLINEAR_ROOT/docs/gpu-results/$kept"
[ -n "${OUT:-}" ] && mkdir -p "$OUT/gpu-results" && cp "$results" "$OUT/gpu-results/$kept"
say "kept as docs/gpu-results/$kept"
fi
"$python" - "$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for k, v in r["parts"].items():
    print(f"   {k:16s} {v['status']:8s} {v.get('reason', '')[:200]}")
PY
exit $rc
