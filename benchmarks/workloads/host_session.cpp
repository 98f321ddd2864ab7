#include "benchmarks/workloads/host_session.hpp"

namespace sublinear::workloads {
namespace {

allocator::host_vmm_options vmm_options(const host_session_options& o) {
  allocator::host_vmm_options v;
  v.granularity = o.granularity;
  v.physical_capacity = o.physical_capacity;
  return v;
}

allocator::options allocator_options(const host_session_options& o) {
  allocator::options a;
  a.budget = o.budget;
  return a;
}

}  // namespace

host_session::host_session(host_session_options options)
    : vmm_(vmm_options(options)),
      device_(host::device_options{options.synchronous}),
      allocator_(vmm_, device_, allocator_options(options)),
      installed_(allocator_) {}

host_session::~host_session() {
  // Queued work may still touch blocks the allocator is about to give back.
  device_.synchronize();
}

}  // namespace sublinear::workloads
