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

# Configures and builds into $1 with extra CMake arguments after it.
sublinear_build() {
  local dir=$1
  shift
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
