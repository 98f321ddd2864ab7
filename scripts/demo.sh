#!/usr/bin/env bash
# Builds sublinear into build/ and runs `sublinear demo`: a model trained for a few
# iterations on the host device (the CPU backend; no GPU needed), printing per-iteration
# time, peak mapped memory and feature-map memory. The run takes seconds.
#
#   scripts/demo.sh                                  ResNet-218, 5 iterations, budget 0.5x
#   scripts/demo.sh --model lstm --seq-len 1024      arguments go to `sublinear demo`
#   scripts/demo.sh --model resnet --depth 1202 --json resnet.json
#   scripts/demo.sh --help                           the demo's arguments
set -euo pipefail
SUBLINEAR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SUBLINEAR_ROOT
source "$SUBLINEAR_ROOT/scripts/lib/deps.sh"

sublinear_ensure_deps
# The same configuration as scripts/test.sh, so the two scripts share build/ without
# reconfiguring it.
echo "== sublinear: building build/" >&2
SUBLINEAR_BUILD_TARGETS=sublinear_cli sublinear_build "$SUBLINEAR_ROOT/build" -DSUBLINEAR_WERROR=ON -DSUBLINEAR_SANITIZE=""
echo "== sublinear: build/bin/sublinear demo $*" >&2
exec "$SUBLINEAR_ROOT/build/bin/sublinear" demo "$@"
