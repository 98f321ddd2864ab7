// Note [Listener failure at a launch] is in cupti/cupti_collector.hpp. Defined here, in a
// file every build compiles, so that the fatal path is tested without CUDA.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "tracer/cupti/cupti_collector.hpp"

namespace sublinear::tracer {
namespace {

std::atomic<launch_failure_hook> g_hook{nullptr};

}  // namespace

launch_failure_hook set_launch_failure_hook(launch_failure_hook hook) noexcept { return g_hook.exchange(hook); }

void fail_at_launch_enter(std::string_view call, std::string_view what) noexcept {
  std::fprintf(stderr,
               "sublinear: fatal: the runtime failed at the entry of %.*s: %.*s\n"
               "sublinear: the launch is queued regardless and would compute on bytes that are not there, so the "
               "process stops here rather than train on wrong values.\n"
               "sublinear: to go on: SUBLINEAR_VALIDATE=always checks every regeneration against a copy and keeps "
               "failing buffers resident; SUBLINEAR_DISABLE=1 trains without sublinear. Please report this with "
               "the SUBLINEAR_LOG=debug output.\n",
               static_cast<int>(call.size()), call.data(), static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  if (const launch_failure_hook hook = g_hook.exchange(nullptr)) hook();  // once, even if it fails again
  std::fflush(stderr);
  std::abort();
}

}  // namespace sublinear::tracer
