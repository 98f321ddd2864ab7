// See Note [CUDA events] in cuda_events.hpp.
#include "device/cuda/cuda_events.hpp"

#include <exception>
#include <string>

#include "device/cuda/driver_table.hpp"
#include "sublinear/error.hpp"

namespace sublinear::device {

cuda_events::cuda_events(int device) {
  std::string why;
  api_ = load_driver(&why);
  CUdevice dev = 0;
  if (api_ == nullptr || !retain_device(*api_, device, &dev, &context_, &why)) {
    throw device_error("sublinear: CUDA events unavailable: " + why);
  }
  device_ = dev;
}

cuda_events::~cuda_events() {
  // May run at process exit after the driver has shut down: nothing to check.
  CUcontext current = nullptr;
  if (api_->ctx_get_current(&current) == CUDA_SUCCESS && current == nullptr) {
    SUBLINEAR_CU_UNCHECKED(api_->ctx_set_current(context_));
  }
  for (CUevent e : pool_) SUBLINEAR_CU_UNCHECKED(api_->event_destroy(e));
  SUBLINEAR_CU_UNCHECKED(api_->primary_ctx_release(device_));
}

void cuda_events::enter() {
  CUcontext current = nullptr;
  SUBLINEAR_CU_CHECK(*api_, api_->ctx_get_current(&current));
  if (current == nullptr) SUBLINEAR_CU_CHECK(*api_, api_->ctx_set_current(context_));
}

event_handle cuda_events::record(stream_handle stream) {
  enter();
  CUevent event = nullptr;
  {
    const std::lock_guard lock(mutex_);
    if (!pool_.empty()) {
      event = pool_.back();
      pool_.pop_back();
    }
  }
  if (event == nullptr) {
    SUBLINEAR_CU_CHECK(*api_, api_->event_create(&event, CU_EVENT_DISABLE_TIMING));
    const std::lock_guard lock(mutex_);
    ++created_;
  }
  const CUresult r = api_->event_record(event, static_cast<CUstream>(stream));
  if (r != CUDA_SUCCESS) {
    release(event);
    throw_cu_error(*api_, r, "cuEventRecord(event, stream)", __FILE__, __LINE__);
  }
  return event;
}

bool cuda_events::query(event_handle event) {
  enter();
  const CUresult r = api_->event_query(static_cast<CUevent>(event));
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  throw_cu_error(*api_, r, "cuEventQuery(event)", __FILE__, __LINE__);
}

void cuda_events::synchronize(event_handle event) {
  enter();
  SUBLINEAR_CU_CHECK(*api_, api_->event_synchronize(static_cast<CUevent>(event)));
}

void cuda_events::release(event_handle event) noexcept {
  if (event == nullptr) return;
  try {
    const std::lock_guard lock(mutex_);
    pool_.push_back(static_cast<CUevent>(event));
  } catch (...) {
    // No room in the pool: give the event back to the driver instead.
    SUBLINEAR_CU_UNCHECKED(api_->event_destroy(static_cast<CUevent>(event)));
  }
}

void cuda_events::synchronize_stream(stream_handle stream) {
  enter();
  SUBLINEAR_CU_CHECK(*api_, api_->stream_synchronize(static_cast<CUstream>(stream)));
}

std::size_t cuda_events::events_created() const {
  const std::lock_guard lock(mutex_);
  return created_;
}

std::unique_ptr<cuda_events> make_cuda_events(int device, std::string* why) noexcept {
  try {
    return std::make_unique<cuda_events>(device);
  } catch (const std::exception& e) {
    if (why != nullptr) {
      try {
        *why = e.what();
      } catch (...) {
      }
    }
    return nullptr;
  }
}

}  // namespace sublinear::device
