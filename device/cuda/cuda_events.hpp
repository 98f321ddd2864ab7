// stream_events over CUDA events, for the caching allocator's deferred unmap.
//
// Note [CUDA events]
// Rationale: the allocator records an event wherever a block was last used and polls it
//   on later mallocs (Note [Deferred unmap]); creating and destroying a CUevent each
//   time would put two driver calls on the free path.
// Approach: released events go back to a pool and are re-recorded later (re-recording
//   a pending event is allowed and supersedes the old record). Events are created with
//   CU_EVENT_DISABLE_TIMING, the cheapest kind. A stream_handle is a CUstream
//   (cudaStream_t); nullptr is the legacy default stream.
// Limitations: the pool only grows, to the most events outstanding at once.
//
// This header does not include <cuda.h>.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/stream_events.hpp"

struct CUctx_st;    // CUcontext
struct CUevent_st;  // CUevent

namespace sublinear::device {

struct driver_api;

class cuda_events final : public stream_events {
 public:
  // Events on CUDA device `device` (an ordinal). Throws sublinear::device_error, with
  // the reason, when there is no driver or no such device.
  explicit cuda_events(int device = 0);
  ~cuda_events() override;
  cuda_events(const cuda_events&) = delete;
  cuda_events& operator=(const cuda_events&) = delete;

  // Throw sublinear::device_error when the driver fails.
  event_handle record(stream_handle stream) override;
  bool query(event_handle event) override;
  void synchronize(event_handle event) override;
  void release(event_handle event) noexcept override;

  // Blocks until all work queued on `stream` has completed.
  void synchronize_stream(stream_handle stream);

  // Events created so far (pooled or outstanding); for tests.
  [[nodiscard]] std::size_t events_created() const;

 private:
  void enter();

  const driver_api* api_ = nullptr;
  int device_ = 0;
  CUctx_st* context_ = nullptr;
  mutable std::mutex mutex_;
  std::vector<CUevent_st*> pool_;
  std::size_t created_ = 0;
};

// The same without exceptions: nullptr with the reason in *why.
std::unique_ptr<cuda_events> make_cuda_events(int device, std::string* why = nullptr) noexcept;

}  // namespace sublinear::device
