#include "workloads/host_session.hpp"

namespace sublinear::workloads {
namespace {

device::host_vmm_options vmm_options(const host_session_options& o) {
  device::host_vmm_options v;
  v.granularity = o.granularity;
  v.physical_capacity = o.physical_capacity;
  return v;
}

// Note [Host size classes]
// PyTorch's classes (1 MiB small requests in 2 MiB segments, 20 MiB large segments) are
// sized for GPU models of gigabytes. The host device's models hold megabytes, so those
// classes would make mapped memory a staircase of 2 MiB steps that hides what a budget
// does. The host session scales them down by 8 with the same ratios, on 64 KiB pages.
allocator::options allocator_options(const host_session_options& o) {
  allocator::options a;
  a.budget = o.budget;
  if (o.scaled_size_classes) {
    a.small_size = 128 * 1024;
    a.small_segment = 256 * 1024;
    a.min_large_alloc = 1280 * 1024;
    a.large_segment = 2560 * 1024;
    a.round_large = 256 * 1024;
  }
  if (o.page_segments) {
    a.small_size = o.granularity / 2;
    a.small_segment = o.granularity;
    a.min_large_alloc = o.granularity;
    a.large_segment = o.granularity;
    a.round_large = o.granularity;
  }
  return a;
}

}  // namespace

host_session::host_session(host_session_options options)
    : vmm_(vmm_options(options)),
      device_(device::host::device_options{options.synchronous}),
      allocator_(vmm_, device_, allocator_options(options)) {
  if (options.install_default) {
    installed_.emplace(allocator_);
    memory_ = std::make_unique<c_api_memory>();
  } else {
    memory_ = std::make_unique<allocator_memory>(allocator_);
  }
}

host_session::~host_session() {
  // Queued work may still touch blocks the allocator is about to give back.
  device_.synchronize();
}

}  // namespace sublinear::workloads
