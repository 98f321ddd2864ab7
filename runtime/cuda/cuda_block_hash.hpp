// Content hashes taken on the GPU (Note [Hash on the device] in block_hash_terms.hpp):
// one kernel per block on the program's stream, eight bytes back, and an event that says
// when they are.
//
// This header does not include <cuda.h>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/engine_types.hpp"

namespace sublinear::device {
struct driver_api;
}

namespace sublinear::runtime {

class cuda_block_hash {
 public:
  // The driver's entry points come from `api` and dlsym; calls run in the caller's
  // current context (the replay device enters its own first).
  explicit cuda_block_hash(const device::driver_api& api);
  ~cuda_block_hash();
  cuda_block_hash(const cuda_block_hash&) = delete;
  cuda_block_hash& operator=(const cuda_block_hash&) = delete;

  // "" when hashes can be taken on the device, else why not (no kernel image in this
  // build, a driver entry point missing, the module refused by the driver). Loads the
  // kernel at the first call, in the calling thread's current context.
  [[nodiscard]] const std::string& unavailable_reason();
  // The hash of `bytes` at `device_src` (8-byte aligned) when `stream` gets here: ready
  // once an event recorded after the eight bytes are back has completed. Throws
  // sublinear::device_error when the driver refuses a call.
  hash_result hash(const void* device_src, std::size_t bytes, device::stream_handle stream);

 private:
  struct pool;
  std::shared_ptr<pool> pool_;  // hashes on their way keep it alive
};

}  // namespace sublinear::runtime
