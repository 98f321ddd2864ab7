#!/usr/bin/env bash
# Builds sublinear and runs every test, ending with CTest's summary.
#
#   scripts/test.sh                     build/ (warnings as errors), all tests
#   scripts/test.sh --sanitize=address  build-asan/ with ASan+UBSan, all tests
#   scripts/test.sh --sanitize=thread   build-tsan/ with TSan, all tests
#   scripts/test.sh --sanitize=all      both sanitizer builds, one after the other
#   scripts/test.sh --no-python         without the Python package's tests (they need torch
#                                       from PyPI, about 9 GiB free; CTest lists them as not run)
#   extra arguments after -- go to ctest (e.g. -- -R caching)
#
# Environment: SUBLINEAR_BUILD_TYPE (CMake build type, default RelWithDebInfo) and
# SUBLINEAR_BUILD_TARGETS (build only these targets, space-separated); the runtime's
# settings check leaves both alone (docs/settings.md).
#
# Without a sanitizer, the Python tests run too: build/venv-python gets torch (PyPI's
# wheel; the tests need only its CPU side), pytest and `pip install .`, and CTest runs
# pytest as the test `python_package`. Where torch cannot be installed (too little disk, PyPI
# unreachable) the other tests run, and the summary says the Python tests did not run and why.
set -euo pipefail
SUBLINEAR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SUBLINEAR_ROOT
source "$SUBLINEAR_ROOT/scripts/lib/deps.sh"

sanitize=""
python=1
python_not_run=""
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize=*) sanitize="${1#--sanitize=}" ;;
    --no-python) python=0 ;;
    --) shift; ctest_args=("$@"); break ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "scripts/test.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done

sublinear_ensure_deps

run_suite() {
  local dir=$1 san=$2
  local not_run="scripts/test.sh --no-python leaves them out"
  if [ -n "$san" ]; then not_run="sanitizer builds leave them out"; fi
  if [ -z "$san" ] && [ "$python" = 0 ]; then python_not_run="$not_run"; fi
  local extra=(-DSUBLINEAR_PYTHON= "-DSUBLINEAR_PYTHON_NOT_RUN=$not_run")
  if [ -z "$san" ] && [ "$python" = 1 ]; then
    echo "== sublinear: Python environment build/venv-python"
    mkdir -p "$SUBLINEAR_ROOT/build"
    local py status=0
    py=$(sublinear_python_env "$SUBLINEAR_ROOT/build/venv-python") || status=$?
    if [ "$status" = 0 ]; then
      # The same python builds the LibTorch example against its torch wheel.
      extra=(-DSUBLINEAR_PYTHON="$py" -DSUBLINEAR_TORCH_PYTHON="$py")
    elif [ "$status" = 3 ]; then
      # torch cannot be had here: the other tests still run, and CTest's summary lists
      # python_package as not run, with this reason in its output.
      python_not_run="$py"
      echo "sublinear: THE PYTHON TESTS WILL NOT RUN: $py" >&2
      extra=(-DSUBLINEAR_PYTHON= -DSUBLINEAR_TORCH_PYTHON= "-DSUBLINEAR_PYTHON_NOT_RUN=$py")
    else
      return "$status"
    fi
  fi
  echo "== sublinear: building $dir (sanitizer: ${san:-none})"
  sublinear_build "$SUBLINEAR_ROOT/$dir" -DSUBLINEAR_WERROR=ON -DSUBLINEAR_SANITIZE="$san" "${extra[@]}"
  echo "== sublinear: testing $dir"
  local env=()
  case "$san" in
    address) env=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1) ;;
    thread) env=(TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1) ;;
  esac
  local rc=0
  env "${env[@]}" SUBLINEAR_SANITIZER="$san" ctest --test-dir "$SUBLINEAR_ROOT/$dir" --output-on-failure \
    -j "$(nproc)" "${ctest_args[@]}" || rc=$?
  if [ -n "$python_not_run" ]; then
    echo "sublinear: the Python tests did not run: $python_not_run" >&2
  fi
  return "$rc"
}

case "$sanitize" in
  "") run_suite build "" ;;
  address) run_suite build-asan address ;;
  thread) run_suite build-tsan thread ;;
  all) run_suite build-asan address; run_suite build-tsan thread ;;
  *) echo "scripts/test.sh: --sanitize must be address, thread or all (got '$sanitize')" >&2; exit 2 ;;
esac
