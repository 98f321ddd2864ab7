// See collector_adapter.hpp.
#include "runtime/cuda/collector_adapter.hpp"

namespace sublinear::runtime {

namespace {
launch_view::kind kind_of(tracer::launch_description::kind k) noexcept {
  switch (k) {
    case tracer::launch_description::kind::kernel: return launch_view::kind::kernel;
    case tracer::launch_description::kind::memcpy: return launch_view::kind::memcpy;
    case tracer::launch_description::kind::memset: return launch_view::kind::memset;
  }
  return launch_view::kind::kernel;
}
}  // namespace

launch_view to_launch_view(const tracer::launch_description& op) noexcept {
  launch_view v;
  v.what = kind_of(op.what);
  v.kernel_handle = op.kernel_handle;
  v.grid = op.grid;
  v.block = op.block;
  v.shared_mem = op.shared_mem;
  v.stream = op.stream;
  v.params = op.params;
  v.attributes = op.attributes;
  v.dst = op.dst;
  v.src = op.src;
  v.bytes = op.bytes;
  v.value = op.value;
  return v;
}

void engine_listener::on_enter(const tracer::launch_description& op) {
  if (before_each_) before_each_();
  engine_.before_launch(to_launch_view(op));
}

void engine_listener::on_exit(const tracer::launch_description& op) { engine_.after_launch(to_launch_view(op)); }

}  // namespace sublinear::runtime
