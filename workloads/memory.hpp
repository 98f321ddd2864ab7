// Device memory for the workloads: through sublinear's C entry points, or straight over one
// allocator.
#pragma once

#include <cstddef>

#include "allocator/caching_allocator.hpp"
#include "workloads/context.hpp"

namespace sublinear::workloads {

// A workloads::memory over sublinear_alloc / sublinear_free (include/sublinear/sublinear.h):
// the calls PyTorch's pluggable allocator makes, served by whatever allocator is installed
// as the process default (host_session installs one). So everything a workload allocates
// is seen by the allocator, and later by the tracer and the runtime, exactly as a
// framework's allocations would be.
class c_api_memory final : public memory {
 public:
  // Throws out_of_memory (figures from the installed allocator's statistics) when the
  // allocator refuses, config_error when no allocator is installed; the message is
  // sublinear_last_error()'s.
  void* alloc(std::size_t bytes, device::host::stream* s) override;
  void free(void* ptr, std::size_t bytes, device::host::stream* s) override;
};

// A workloads::memory straight over one caching allocator, bypassing the process-default
// slot: for sessions that run side by side in one process (host_session_options::
// install_default = false), each on its own thread.
class allocator_memory final : public memory {
 public:
  explicit allocator_memory(allocator::caching_allocator& a) : alloc_(a) {}
  void* alloc(std::size_t bytes, device::host::stream* s) override;
  void free(void* ptr, std::size_t bytes, device::host::stream* s) override;
  [[nodiscard]] memory_stats stats() const override;
  void reset_peaks() override;

 private:
  allocator::caching_allocator& alloc_;
};

}  // namespace sublinear::workloads
