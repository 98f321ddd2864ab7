# Installs the Debian packages the build needs, if any is missing. Sourced by the scripts.
sublinear_ensure_deps() {
  local pkgs=(cmake g++ make libboost-dev libgtest-dev libgmock-dev libbenchmark-dev coinor-libcbc-dev pkg-config)
  local missing=()
  local p
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "sublinear: installing missing packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Configures and builds into $1 with extra CMake arguments after it. A fresh build of every
# target takes about 1.5 GB; with less than 2 GiB free it stops before starting, saying so.
sublinear_build() {
  local dir=$1
  shift
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    local free_mib
    free_mib=$(sublinear_free_mib "$dir")
    if [ "$free_mib" -lt 2048 ]; then
      echo "sublinear: a fresh build in $dir needs about 2 GiB free and $(sublinear_show_mib "$free_mib") is" \
        "free there; free space (old build directories, caches) and run this again" >&2
      return 1
    fi
  fi
  cmake -S "$SUBLINEAR_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE="${SUBLINEAR_BUILD_TYPE:-RelWithDebInfo}" "$@" >"$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log"
    echo "sublinear: configure failed (log above)" >&2
    return 1
  }
  # SUBLINEAR_BUILD_TARGETS (space-separated) limits the build to those targets.
  local targets=()
  local t
  for t in ${SUBLINEAR_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
  cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
}

# Free space in MiB on the filesystem that holds $1 (or its nearest existing parent).
sublinear_free_mib() {
  local d=$1
  while [ ! -e "$d" ]; do d=$(dirname "$d"); done
  df -Pm "$d" | awk 'NR == 2 { print $4 }'
}

# $1 MiB as people read it: "640 MiB", "7.3 GiB".
sublinear_show_mib() {
  awk -v m="$1" 'BEGIN { if (m < 1024) printf "%d MiB", m; else printf "%.1f GiB", m / 1024 }'
}

# Makes $1 a virtual environment with CPU-usable torch (PyPI's wheel), torchvision, pytest and this
# package (`pip install .`), for the Python tests; prints the environment's python. Installs
# Debian's python3-venv first if this python cannot make a venv. torch is the slow part
# (about 3 GB to download, 5.5 GB installed); it is skipped when the venv already has it.
# Returns 3, printing why instead of a python, when torch cannot be had here (too little disk,
# PyPI unreachable): the caller runs the other tests and CTest lists the Python ones as not run.
# pip keeps no cache and unpacks under $1.tmp, so the space it needs is on one filesystem.
sublinear_python_env() {
  local venv=$1
  local need_mib=9216
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "sublinear: installing python3-venv for the Python tests" >&2
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3 python3-venv python3-pip >/dev/null
  fi
  local py="$venv/bin/python"
  if ! { [ -x "$py" ] && "$py" -c 'import torch, pytest' >/dev/null 2>&1; }; then
    local free_mib
    free_mib=$(sublinear_free_mib "$venv")
    if [ "$free_mib" -lt "$need_mib" ]; then
      echo "torch from PyPI needs about $(sublinear_show_mib "$need_mib") free under $(dirname "$venv")," \
        "and $(sublinear_show_mib "$free_mib") is free; free space there, or run scripts/test.sh --no-python"
      return 3
    fi
    if [ ! -x "$py" ]; then
      python3 -m venv "$venv" >&2
    fi
    echo "sublinear: installing torch and pytest from PyPI into $venv (3 GB to download, 5.5 GB installed, a few minutes)" >&2
    mkdir -p "$venv.tmp"
    if ! TMPDIR="$venv.tmp" "$py" -m pip install -q --disable-pip-version-check --no-cache-dir torch pytest >&2; then
      rm -rf "$venv" "$venv.tmp"
      free_mib=$(sublinear_free_mib "$(dirname "$venv")")
      echo "pip could not install torch and pytest into $venv (its error is above;" \
        "$(sublinear_show_mib "$free_mib") free there now); fix that, or run scripts/test.sh --no-python"
      return 3
    fi
    rm -rf "$venv.tmp"
  fi
  # torchvision for the model preview's tests (docs/preview.md), built for the torch installed
  # above: pip keeps that torch (the pin) and picks a torchvision that supports it.
  if ! "$py" -c 'import torchvision' >/dev/null 2>&1; then
    local torch_version
    torch_version=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])') || return 1
    echo "sublinear: installing torchvision for torch $torch_version from PyPI into $venv" >&2
    mkdir -p "$venv.tmp"
    TMPDIR="$venv.tmp" "$py" -m pip install -q --disable-pip-version-check --no-cache-dir \
      "torch==$torch_version" torchvision >&2 || {
      echo "sublinear: could not install a torchvision for torch $torch_version into $venv; the preview tests" \
        "that use torchvision models skip without it" >&2
    }
    rm -rf "$venv.tmp"
  fi
  echo "sublinear: pip install . into $venv (builds the package's native libraries)" >&2
  "$py" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall \
    -C build-dir="$SUBLINEAR_ROOT/build/python-pip" "$SUBLINEAR_ROOT" >&2 || {
    echo "sublinear: pip install . failed (output above)" >&2
    return 1
  }
  echo "$py"
}
