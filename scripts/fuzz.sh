#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/NAME_fuzz.cpp) with Clang, ASan and UBSan in
# build-fuzz/ (CMake's SUBLINEAR_SANITIZE=fuzzer) and runs one of them on its corpus.
#
#   scripts/fuzz.sh NAME [libFuzzer options]
#       NAME: trace_reader, report_reader or plan. Runs build-fuzz/bin/NAME_fuzz on
#       tests/fuzz/corpus/NAME (read only; what the run finds goes to build-fuzz/corpus/NAME)
#       with -timeout=10 -rss_limit_mb=2048 before the options given, e.g.
#         scripts/fuzz.sh plan -max_total_time=600
#   scripts/fuzz.sh NAME --merge
#       replaces tests/fuzz/corpus/NAME with the fewest inputs of it and of
#       build-fuzz/corpus/NAME that cover every edge they cover (libFuzzer's
#       -set_cover_merge=1, hit counts left out: a small corpus to keep in git).
#
# Needs clang 16 or later and libFuzzer (Debian: clang-16 libclang-rt-16-dev).
set -euo pipefail
SUBLINEAR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SUBLINEAR_ROOT
source "$SUBLINEAR_ROOT/scripts/lib/deps.sh"

case "${1:-}" in
  trace_reader|report_reader|plan) name=$1; shift ;;
  -h|--help|"") sed -n '2,15p' "$0"; exit 0 ;;
  *) echo "scripts/fuzz.sh: unknown fuzz target '$1': trace_reader, report_reader or plan" >&2; exit 2 ;;
esac
# Clang 16 or later: the sources capture structured bindings in lambdas (C++20), which
# Clang 15 and earlier refuse. The newest clang++-N on the PATH, else clang++.
cxx=""
for v in 25 24 23 22 21 20 19 18 17 16; do
  if command -v "clang++-$v" >/dev/null; then cxx="clang++-$v"; cc="clang-$v"; break; fi
done
if [ -z "$cxx" ] && command -v clang++ >/dev/null &&
   [ "$(clang++ -dumpversion | cut -d. -f1)" -ge 16 ]; then cxx=clang++; cc=clang; fi
if [ -z "$cxx" ] || [ ! -f "$("$cxx" -print-file-name=libclang_rt.fuzzer-x86_64.a)" ]; then
  echo "scripts/fuzz.sh: needs clang++ 16 or later with libFuzzer (Debian: apt-get install clang-16 libclang-rt-16-dev)" >&2
  exit 2
fi
sublinear_ensure_deps

dir="$SUBLINEAR_ROOT/build-fuzz"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache); fi
SUBLINEAR_BUILD_TARGETS="trace_reader_fuzz report_reader_fuzz plan_fuzz" sublinear_build "$dir" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" \
  -DSUBLINEAR_SANITIZE=fuzzer -DSUBLINEAR_CUDA=OFF -DSUBLINEAR_BUILD_BENCHMARKS=OFF -DSUBLINEAR_PYTHON=
fuzzer="$dir/bin/${name}_fuzz"
kept="$SUBLINEAR_ROOT/tests/fuzz/corpus/$name"
found="$dir/corpus/$name"
mkdir -p "$found"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
symbolizer="$(dirname "$(readlink -f "$(command -v "$cxx")")")/llvm-symbolizer"
[ -x "$symbolizer" ] || symbolizer="$(command -v llvm-symbolizer || true)"
if [ -n "$symbolizer" ]; then export ASAN_SYMBOLIZER_PATH="$symbolizer"; fi

if [ "${1:-}" = "--merge" ]; then
  merged=$(mktemp -d)
  "$fuzzer" -set_cover_merge=1 -use_counters=0 -timeout=10 -rss_limit_mb=2048 "$merged" "$kept" "$found"
  rm -f "$kept"/*
  cp "$merged"/* "$kept"/
  rm -rf "$merged"
  echo "scripts/fuzz.sh: $kept now holds $(ls "$kept" | wc -l) inputs"
  exit 0
fi
cd "$dir"  # crash-*, timeout-* and oom-* files land here
exec "$fuzzer" -timeout=10 -rss_limit_mb=2048 "$@" "$found" "$kept"
