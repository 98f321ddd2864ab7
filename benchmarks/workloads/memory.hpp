// Device memory for the workloads through sublinear's C entry points.
#pragma once

#include <cstddef>

#include "benchmarks/workloads/context.hpp"

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
  void* alloc(std::size_t bytes, host::stream* s) override;
  void free(void* ptr, std::size_t bytes, host::stream* s) override;
};

}  // namespace sublinear::workloads
