// Small kernels shared by the host-device tests. Each is registered once per process
// (the registry is process-wide and names are unique), on first use.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <thread>
#include <vector>

#include "device/host/device.hpp"

namespace sublinear::device::host::testing {

// Appends `value` to `*log`. The log is only read after a synchronize, which orders it.
struct append_params {
  std::vector<int>* log;
  int value;
};

inline void append_body(const launch_config&, const append_params& p) { p.log->push_back(p.value); }

inline const kernel& append_kernel() {
  static const kernel& k = register_kernel<append_params, append_body>(
      "test.append", {SUBLINEAR_PARAM(append_params, log), SUBLINEAR_PARAM(append_params, value)});
  return k;
}

// Blocks its stream until the test opens `gate`, then sets `ran`. If it finds itself on
// the thread that launched it (`caller`), it records that and returns at once instead of
// waiting, so a launch that wrongly runs inline fails the test instead of hanging it.
struct gate_params {
  std::latch* gate;
  std::atomic<bool>* ran;
  std::atomic<bool>* ran_on_caller;
  std::thread::id caller;
};

inline void gate_body(const launch_config&, const gate_params& p) {
  if (std::this_thread::get_id() == p.caller) {
    p.ran_on_caller->store(true);
  } else {
    p.gate->wait();
  }
  p.ran->store(true);
}

inline const kernel& gate_kernel() {
  static const kernel& k = register_kernel<gate_params, gate_body>(
      "test.gate", {SUBLINEAR_PARAM(gate_params, gate), SUBLINEAR_PARAM(gate_params, ran),
                    SUBLINEAR_PARAM(gate_params, ran_on_caller),
                    SUBLINEAR_PARAM(gate_params, caller)});
  return k;
}

// Holds a stream until release() (or destruction): work queued after it stays pending.
class stream_blocker {
 public:
  stream_blocker(device& dev, stream* s) {
    gate_params p{&gate_, &ran_, &ran_on_caller_, std::this_thread::get_id()};
    dev.launch(gate_kernel(), {}, s, &p);
  }
  ~stream_blocker() { release(); }
  stream_blocker(const stream_blocker&) = delete;
  stream_blocker& operator=(const stream_blocker&) = delete;

  void release() {
    if (!released_) {
      released_ = true;
      gate_.count_down();
    }
  }
  [[nodiscard]] bool ran() const { return ran_.load(); }
  [[nodiscard]] bool ran_on_caller() const { return ran_on_caller_.load(); }

 private:
  std::latch gate_{1};
  std::atomic<bool> ran_{false};
  std::atomic<bool> ran_on_caller_{false};
  bool released_ = false;
};

// dst[i] = value for n ints: a producer slow enough for a missing wait to show.
struct fill_params {
  int* dst;
  std::size_t n;
  int value;
};

inline void fill_body(const launch_config&, const fill_params& p) {
  for (std::size_t i = 0; i < p.n; ++i) {
    p.dst[i] = p.value;
  }
}

inline const kernel& fill_kernel() {
  static const kernel& k = register_kernel<fill_params, fill_body>(
      "test.fill", {SUBLINEAR_PARAM(fill_params, dst), SUBLINEAR_PARAM(fill_params, n),
                    SUBLINEAR_PARAM(fill_params, value)});
  return k;
}

// *sum = sum of src[0..n).
struct sum_params {
  const int* src;
  std::size_t n;
  std::int64_t* sum;
};

inline void sum_body(const launch_config&, const sum_params& p) {
  std::int64_t s = 0;
  for (std::size_t i = 0; i < p.n; ++i) {
    s += p.src[i];
  }
  *p.sum = s;
}

inline const kernel& sum_kernel() {
  static const kernel& k = register_kernel<sum_params, sum_body>(
      "test.sum", {SUBLINEAR_PARAM(sum_params, src), SUBLINEAR_PARAM(sum_params, n),
                   SUBLINEAR_PARAM(sum_params, sum)});
  return k;
}

inline void append(device& dev, stream* s, std::vector<int>* log, int value) {
  append_params p{log, value};
  dev.launch(append_kernel(), {}, s, &p);
}

}  // namespace sublinear::device::host::testing
