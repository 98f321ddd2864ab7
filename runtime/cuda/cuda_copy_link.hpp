// Offload copies on a GPU: a copy stream, a pinned host pool and events.
//
// Note [CUDA copy link]
// Rationale: offloading pays only if the copies overlap compute, which needs a stream of
//   their own and page-locked host memory (pageable memory makes cuMemcpyAsync stage
//   through a driver buffer and serialise; pinning per copy cost torchtitan 53 -> 11 GB/s).
// Approach: one non-blocking stream per direction (each direction has its own copy
//   engine on the GPU), created at the first copy. A copy records an event on the stream
//   it follows, the copy stream waits on it, cuMemcpyAsync moves the bytes, and an event
//   recorded after it is the copy's handle: cuStreamWaitEvent lets a compute stream wait
//   on it, cuEventQuery polls it. The host pool is one cuMemHostAlloc, grown only when a
//   plan needs more, kept for the process. Timing events around each copy and around each
//   compute-stream wait give the link's busy time and the stalls, collected lazily. The
//   link is measured once per device at the first query: a few 8 MiB copies each way
//   from the pinned pool, timed with events; the result is cached per device ordinal.
// Limitations: entry points are looked up with dlsym (drivers without them: no copy link,
//   and the engine's synchronous default applies). Compiled here, run only on a GPU
//   machine (docs/gpu-suite.md).
//
// This header does not include <cuda.h>.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/engine_types.hpp"

struct CUctx_st;  // CUcontext

namespace sublinear::device {
struct driver_api;
}

namespace sublinear::runtime {

class cuda_copy_link {
 public:
  cuda_copy_link(const device::driver_api& api, CUctx_st* context);
  ~cuda_copy_link();
  cuda_copy_link(const cuda_copy_link&) = delete;
  cuda_copy_link& operator=(const cuda_copy_link&) = delete;

  // Whether the driver has every entry point this needs.
  [[nodiscard]] bool available() const noexcept;
  std::byte* host_pool(std::size_t bytes);
  // Whether pinned() can give memory: the driver has cuMemHostAlloc and cuMemFreeHost.
  [[nodiscard]] bool can_pin() const noexcept;
  // `bytes` of pinned host memory of its own (nullptr where the driver refuses), given
  // back with unpin.
  std::byte* pinned(std::size_t bytes);
  void unpin(std::byte* p) noexcept;
  replay_device::copy_handle copy(void* dst, const void* src, std::size_t bytes, device::stream_handle after,
                                  bool to_host);
  bool done(replay_device::copy_handle c);
  void wait(replay_device::copy_handle c);
  void stream_wait(device::stream_handle stream, replay_device::copy_handle c);
  void release(replay_device::copy_handle c) noexcept;
  replay_device::link_figures figures();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sublinear::runtime
