// What every workload op runs with: a host device, a stream, and device memory obtained
// the way a framework obtains it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "device/host/device.hpp"

namespace sublinear::workloads {

// The allocator figures training reports per iteration.
struct memory_stats {
  std::size_t allocated = 0, allocated_peak = 0, mapped_peak = 0, resident_peak = 0;
};

// Where workloads get device memory. The production implementation goes through the
// sublinear C entry points (sublinear_alloc / sublinear_free), exactly as PyTorch's
// pluggable allocator would; tests may pass any other.
class memory {
 public:
  virtual ~memory() = default;
  virtual void* alloc(std::size_t bytes, device::host::stream* s) = 0;
  virtual void free(void* ptr, std::size_t bytes, device::host::stream* s) = 0;
  // The serving allocator's figures, and the start of a new peak. By default those of the
  // process-default allocator (sublinear_get_stats, sublinear_reset_peaks); zeros when
  // none is installed.
  [[nodiscard]] virtual memory_stats stats() const;
  virtual void reset_peaks();
};

// A float32 device tensor. Plain data: ownership is the training loop's business
// (framework-like: it frees temporaries right after their op).
struct tensor {
  float* data = nullptr;
  std::vector<std::int64_t> shape;

  [[nodiscard]] std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return shape.empty() ? 0 : n;
  }
  [[nodiscard]] std::size_t bytes() const { return static_cast<std::size_t>(numel()) * sizeof(float); }
  [[nodiscard]] std::int64_t dim(std::size_t i) const { return shape.at(i); }
};

struct context {
  device::host::device& dev;
  device::host::stream* stream;  // nullptr: the default stream
  memory& mem;

  // Allocates an uninitialized tensor on this context's stream.
  tensor empty(std::initializer_list<std::int64_t> shape) { return empty(std::vector<std::int64_t>(shape)); }
  tensor empty(std::vector<std::int64_t> shape) {
    tensor t;
    t.shape = std::move(shape);
    t.data = static_cast<float*>(mem.alloc(t.bytes(), stream));
    return t;
  }
  // Frees a tensor (stream-ordered, as a framework frees) and clears it.
  void release(tensor& t) {
    if (t.data != nullptr) mem.free(t.data, t.bytes(), stream);
    t.data = nullptr;
  }
  // Raw workspace bytes (a convolution's scratch), freed with release_bytes.
  void* bytes(std::size_t n) { return mem.alloc(n, stream); }
  void release_bytes(void* p, std::size_t n) { mem.free(p, n, stream); }
};

}  // namespace sublinear::workloads
