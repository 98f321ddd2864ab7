// The shared test harness for the workload kernels: plain heap memory, a synchronous
// host device, tensor upload/download, and a finite-difference gradient check.
//
// Note [Gradient check]
// Rationale: every backward kernel is checked against the forward ops it differentiates,
//   with nothing but the forward ops themselves as the reference. A check that passes must
//   be honest (no tolerance so loose that a wrong gradient slips through) and fast.
// Approach: the test reduces the op's output to a scalar with a fixed random projection,
//   L = sum_i w_i * y_i, accumulated in double on the host (`project`), so dL/dy = w is the
//   upstream gradient the test feeds to the backward op. For each input element the check
//   perturbs x_j in float to x_j +- eps, re-runs the forward ops, and forms the central
//   difference (L+ - L-) / (x_j+ - x_j-), dividing by the float-rounded step actually
//   taken. An element fails when |analytic - numeric| > atol + rtol * max(|analytic|,
//   |numeric|). The defaults (eps 1e-2, atol 5e-3, rtol 1e-2) suit O(1) values over a few
//   hundred elements: float roundoff in L is ~1e-5, i.e. ~1e-3 in a difference quotient,
//   while a flipped sign or a missing term is off by O(1).
// Limitations: kinks (ReLU at 0, max-pool ties) break central differences; tests choose
//   inputs at least eps away from them. The loss function must be pure and must release
//   every tensor it allocates (checked when the context's memory is a heap_memory).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "device/host/device.hpp"
#include "workloads/context.hpp"

namespace sublinear::workloads::testkit {

// Device memory from aligned_alloc, with counters and a log. The i-th allocation starts
// (misalign + i * misalign_step) % 64 bytes past a 64-byte boundary, so a test can run the
// same computation on buffers at other addresses and alignments (keep both multiples of 4
// for floats). free() releases at once, which is right for a synchronous device; on an
// asynchronous one, wrap it in stream_ordered_memory.
class heap_memory final : public memory {
 public:
  explicit heap_memory(std::size_t misalign = 0, std::size_t misalign_step = 0)
      : misalign_(misalign), misalign_step_(misalign_step) {}
  ~heap_memory() override {
    for (auto& [ptr, blk] : live_) std::free(blk.base);
  }
  heap_memory(const heap_memory&) = delete;
  heap_memory& operator=(const heap_memory&) = delete;

  void* alloc(std::size_t bytes, device::host::stream* /*s*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::size_t shift = (misalign_ + allocs_ * misalign_step_) % 64;
    const std::size_t total = (bytes + shift + 64) / 64 * 64;
    auto* base = static_cast<std::byte*>(std::aligned_alloc(64, total));
    if (base == nullptr) throw std::bad_alloc();
    void* p = base + shift;
    live_[p] = block{base, bytes};
    log_.push_back(mem_event{true, p, bytes});
    ++allocs_;
    live_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    return p;
  }
  void free(void* ptr, std::size_t bytes, device::host::stream* /*s*/) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      ++bad_frees_;
      return;
    }
    if (it->second.bytes != bytes) ++bad_frees_;
    live_bytes_ -= it->second.bytes;
    log_.push_back(mem_event{false, ptr, bytes});
    std::free(it->second.base);
    live_.erase(it);
    ++frees_;
  }

  [[nodiscard]] std::size_t allocs() const { std::lock_guard<std::mutex> l(mu_); return allocs_; }
  [[nodiscard]] std::size_t frees() const { std::lock_guard<std::mutex> l(mu_); return frees_; }
  [[nodiscard]] std::size_t live() const { std::lock_guard<std::mutex> l(mu_); return live_.size(); }
  [[nodiscard]] std::size_t live_bytes() const { std::lock_guard<std::mutex> l(mu_); return live_bytes_; }
  [[nodiscard]] std::size_t peak_bytes() const { std::lock_guard<std::mutex> l(mu_); return peak_bytes_; }
  // Frees of unknown pointers or with a size other than the allocation's.
  [[nodiscard]] std::size_t bad_frees() const { std::lock_guard<std::mutex> l(mu_); return bad_frees_; }
  // Every alloc and free so far, in order (a test may clear it to watch one op).
  struct mem_event {
    bool alloc;
    void* ptr;
    std::size_t bytes;
  };
  [[nodiscard]] std::vector<mem_event> events() const { std::lock_guard<std::mutex> l(mu_); return log_; }
  void clear_events() { std::lock_guard<std::mutex> l(mu_); log_.clear(); }
  // Whether p is a live allocation's address.
  [[nodiscard]] bool owns(const void* p) const {
    std::lock_guard<std::mutex> l(mu_);
    return live_.count(const_cast<void*>(p)) != 0;
  }

 private:
  struct block {
    std::byte* base;
    std::size_t bytes;
  };
  std::size_t misalign_, misalign_step_;
  mutable std::mutex mu_;
  std::map<void*, block> live_;
  std::vector<mem_event> log_;
  std::size_t allocs_ = 0, frees_ = 0, bad_frees_ = 0;
  std::size_t live_bytes_ = 0, peak_bytes_ = 0;
};

// Frees through a host function on the freeing stream, so a buffer goes back only after
// the work queued before its free has run: the stream-ordered semantics of a caching
// allocator, for tests on an asynchronous device. `inner` must outlive the device's work.
class stream_ordered_memory final : public memory {
 public:
  stream_ordered_memory(device::host::device& dev, memory& inner) : dev_(dev), inner_(inner) {}
  void* alloc(std::size_t bytes, device::host::stream* s) override { return inner_.alloc(bytes, s); }
  void free(void* ptr, std::size_t bytes, device::host::stream* s) override {
    memory& inner = inner_;
    dev_.host_func(s, [&inner, ptr, bytes, s] { inner.free(ptr, bytes, s); });
  }

 private:
  device::host::device& dev_;
  memory& inner_;
};

// ---- host <-> device -------------------------------------------------------------------

inline tensor upload(context& ctx, const std::vector<float>& values, std::vector<std::int64_t> shape) {
  tensor t = ctx.empty(std::move(shape));
  if (static_cast<std::size_t>(t.numel()) != values.size()) {
    ADD_FAILURE() << "upload: " << values.size() << " values for a tensor of " << t.numel();
    return t;
  }
  if (!values.empty()) ctx.dev.memcpy_async(t.data, values.data(), t.bytes(), ctx.stream);
  ctx.dev.synchronize(ctx.stream);
  return t;
}

inline std::vector<float> download(context& ctx, const tensor& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  if (!out.empty()) ctx.dev.memcpy_async(out.data(), t.data, t.bytes(), ctx.stream);
  ctx.dev.synchronize(ctx.stream);
  return out;
}

// Overwrites an existing device tensor with host values.
inline void overwrite(context& ctx, const tensor& t, const std::vector<float>& values) {
  if (static_cast<std::size_t>(t.numel()) != values.size()) {
    ADD_FAILURE() << "overwrite: " << values.size() << " values for a tensor of " << t.numel();
    return;
  }
  if (!values.empty()) ctx.dev.memcpy_async(t.data, values.data(), t.bytes(), ctx.stream);
  ctx.dev.synchronize(ctx.stream);
}

// Deterministic uniform values in [lo, hi) from a seed (splitmix64), host side.
inline std::vector<float> random_values(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  std::uint64_t state = seed;
  for (auto& x : v) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    double u = static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
    x = static_cast<float>(lo + (hi - lo) * u);
  }
  return v;
}

// Values in [lo, hi) whose magnitude is at least `margin` (inputs kept away from a kink at 0).
inline std::vector<float> random_away_from_zero(std::size_t n, std::uint64_t seed, float margin,
                                                float lo = -1.0f, float hi = 1.0f) {
  auto v = random_values(n, seed, lo, hi);
  for (auto& x : v) {
    if (std::fabs(x) < margin) x = x < 0 ? x - 2 * margin : x + 2 * margin;
  }
  return v;
}

// The projection loss sum_i w_i * y_i, accumulated in double.
inline double project(context& ctx, const tensor& y, const std::vector<float>& w) {
  auto values = download(ctx, y);
  if (values.size() != w.size()) {
    ADD_FAILURE() << "project: " << values.size() << " outputs, " << w.size() << " weights";
    return 0.0;
  }
  double acc = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i) acc += static_cast<double>(values[i]) * w[i];
  return acc;
}

// ---- the check ---------------------------------------------------------------------------

struct gradcheck_options {
  float eps = 1e-2f;
  double atol = 5e-3;
  double rtol = 1e-2;
  std::size_t max_elements = 0;  // 0: every element; else an evenly strided sample
  std::size_t max_reported = 8;  // mismatches listed in the failure message
  bool stop_at_first_failure = false;
};

// Compares `analytic` (d loss / d x, downloaded) with central differences of `loss`
// perturbing x on the device. x is restored afterwards. `name` labels the message.
inline ::testing::AssertionResult gradcheck(context& ctx, const tensor& x, const std::vector<float>& analytic,
                                            const std::function<double()>& loss, const std::string& name = "x",
                                            const gradcheck_options& opt = {}) {
  const auto n = static_cast<std::size_t>(x.numel());
  if (analytic.size() != n) {
    return ::testing::AssertionFailure() << name << ": analytic gradient has " << analytic.size()
                                         << " elements, tensor has " << n;
  }
  auto* heap = dynamic_cast<heap_memory*>(&ctx.mem);
  const std::vector<float> original = download(ctx, x);
  std::vector<float> probe = original;
  const std::size_t stride = (opt.max_elements == 0 || n <= opt.max_elements) ? 1 : (n + opt.max_elements - 1) / opt.max_elements;

  std::ostringstream report;
  std::size_t failures = 0, checked = 0;
  double worst = 0.0;
  for (std::size_t j = 0; j < n; j += stride) {
    const float xp = original[j] + opt.eps;
    const float xm = original[j] - opt.eps;
    const std::size_t live_before = heap != nullptr ? heap->live() : 0;
    probe[j] = xp;
    overwrite(ctx, x, probe);
    const double lp = loss();
    probe[j] = xm;
    overwrite(ctx, x, probe);
    const double lm = loss();
    probe[j] = original[j];
    if (heap != nullptr && heap->live() != live_before) {
      overwrite(ctx, x, original);
      return ::testing::AssertionFailure() << name << ": the loss function leaked "
                                           << (heap->live() - live_before) << " allocation(s)";
    }
    const double numeric = (lp - lm) / (static_cast<double>(xp) - static_cast<double>(xm));
    const double a = analytic[j];
    const double err = std::fabs(a - numeric);
    const double allowed = opt.atol + opt.rtol * std::max(std::fabs(a), std::fabs(numeric));
    worst = std::max(worst, err / allowed);
    ++checked;
    if (!(err <= allowed)) {
      if (failures < opt.max_reported) {
        report << "\n  [" << j << "] analytic " << a << " numeric " << numeric << " (|diff| " << err
               << " > " << allowed << ")";
      }
      ++failures;
      if (opt.stop_at_first_failure) break;
    }
  }
  overwrite(ctx, x, original);
  if (failures != 0) {
    return ::testing::AssertionFailure() << name << ": " << failures << " of " << checked
                                         << " elements differ from central differences" << report.str();
  }
  return ::testing::AssertionSuccess() << name << ": " << checked << " elements, worst error/allowed " << worst;
}

// The check passes for `analytic` AND fails for -analytic: the second half proves that the
// tolerances and the chosen inputs can tell a right gradient from a wrong one (an all-zero
// gradient, or one too small for the tolerance, would make the first half vacuous).
inline ::testing::AssertionResult gradcheck_discriminating(context& ctx, const tensor& x,
                                                           const std::vector<float>& analytic,
                                                           const std::function<double()>& loss,
                                                           const std::string& name = "x",
                                                           const gradcheck_options& opt = {}) {
  auto right = gradcheck(ctx, x, analytic, loss, name, opt);
  if (!right) return right;
  std::vector<float> flipped(analytic.size());
  for (std::size_t i = 0; i < analytic.size(); ++i) flipped[i] = -analytic[i];
  gradcheck_options quick = opt;
  quick.stop_at_first_failure = true;
  if (gradcheck(ctx, x, flipped, loss, name, quick)) {
    return ::testing::AssertionFailure() << name << ": the check also accepts the NEGATED gradient, so it "
                                         << "cannot catch a wrong one (gradient too small for the tolerance?)";
  }
  return right;
}

// ---- fixture -------------------------------------------------------------------------------

// A synchronous host device (every operation runs at once on the calling thread), plain heap
// memory and a context on the default stream.
class workload_test : public ::testing::Test {
 protected:
  workload_test() : dev_(device::host::device_options{true}), ctx_{dev_, nullptr, mem_} {}

  tensor upload(const std::vector<float>& values, std::vector<std::int64_t> shape) {
    return testkit::upload(ctx_, values, std::move(shape));
  }
  std::vector<float> download(const tensor& t) { return testkit::download(ctx_, t); }
  // A tensor of uniform random values in [lo, hi).
  tensor random(std::vector<std::int64_t> shape, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return upload(random_values(static_cast<std::size_t>(n), seed, lo, hi), std::move(shape));
  }
  tensor zeros(std::vector<std::int64_t> shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return upload(std::vector<float>(static_cast<std::size_t>(n), 0.0f), std::move(shape));
  }
  double project(const tensor& y, const std::vector<float>& w) { return testkit::project(ctx_, y, w); }
  // gradcheck_discriminating on this fixture's context.
  ::testing::AssertionResult gradcheck(const tensor& x, const std::vector<float>& analytic,
                                       const std::function<double()>& loss, const std::string& name = "x",
                                       const gradcheck_options& opt = {}) {
    return testkit::gradcheck_discriminating(ctx_, x, analytic, loss, name, opt);
  }
  void release(tensor& t) { ctx_.release(t); }
  void TearDown() override { EXPECT_EQ(mem_.bad_frees(), 0u) << "frees of unknown pointers or with wrong sizes"; }

  heap_memory mem_;
  device::host::device dev_;
  context ctx_;
};

}  // namespace sublinear::workloads::testkit
