// Training a small host workload while recording, with an iteration marker after each
// optimizer step: the ground truth the iteration detectors are checked against
// (iterations_test.cpp, online_iterations_test.cpp). Optionally with noise events.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

#include "workloads/models/registry.hpp"
#include "workloads/training.hpp"
#include "tracer/events.hpp"
#include "tracer_fixture.hpp"

namespace sublinear::tracer::testing {

using workloads::models::model_kind;

// Memory that now and then does what a data loader or a logger does in the middle of a
// step: an extra allocation and free, or a small launch. Deterministic for a seed.
class noisy_memory final : public workloads::memory {
 public:
  noisy_memory(workloads::memory& inner, device::host::device& dev, double probability, std::uint64_t seed)
      : inner_(inner), dev_(dev), probability_(probability), rng_(seed) {}
  void* alloc(std::size_t bytes, device::host::stream* s) override {
    maybe_noise(s);
    return inner_.alloc(bytes, s);
  }
  void free(void* p, std::size_t bytes, device::host::stream* s) override { inner_.free(p, bytes, s); }
  [[nodiscard]] int injected() const { return injected_; }

 private:
  void maybe_noise(device::host::stream* s) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (u(rng_) >= probability_) return;
    ++injected_;
    if (u(rng_) < 0.5) {
      testing::launch(dev_, testing::noop_kernel(), testing::noop_params{injected_}, s);
    } else {
      const std::size_t n = 256 + rng_() % 4096;
      void* q = inner_.alloc(n, s);
      inner_.free(q, n, s);
    }
  }

  workloads::memory& inner_;
  device::host::device& dev_;
  double probability_;
  std::mt19937_64 rng_;
  int injected_ = 0;
};

// Trains a small model of `kind` for `iterations` steps, marking each iteration's end.
inline trace train_marked(model_kind kind, int iterations, double noise = 0.0, std::int64_t batch = 2,
                   int* injected = nullptr) {
  traced_session s;
  auto base = s.ctx();
  noisy_memory mem(base.mem, s.dev(), noise, 42);
  workloads::context ctx{s.dev(), nullptr, mem};
  workloads::models::model_config mc;
  mc.kind = kind;
  mc.batch = batch;
  if (workloads::models::uses_depth(kind)) mc.depth = kind == model_kind::resnet ? 8 : kind == model_kind::densenet ? 10 : 2;
  if (workloads::models::uses_seq_len(kind)) mc.seq_len = 6;
  auto m = workloads::models::make_model(mc);
  workloads::training_options o;
  o.iterations = iterations;
  o.on_iteration_end = [&](const workloads::iteration_figures&) { s.rec().mark_iteration(); };
  static_cast<void>(workloads::train(ctx, *m, o));
  m->release();
  if (injected != nullptr) *injected = mem.injected();
  return s.take();
}

}  // namespace sublinear::tracer::testing
