// Synthetic data for the workload models: learnable, deterministic, made on the host.
//
// Note [Synthetic tasks]
// Rationale: the models must train on something a program can make without a data set,
//   the same bits on every run and machine, and learnable enough that a falling loss
//   shows backward is wired right.
// Approach: classification by prototypes. Class k has a fixed random prototype (a
//   function of the data seed alone); a sample of class k is its prototype plus uniform
//   noise, and its label is k. Which class each sample gets is a function of the seed,
//   the batch index and the sample's position. All values come from splitmix64 on
//   integer keys, so nothing depends on the C++ library's distributions.
// Limitations: the tasks are easy on purpose; they exercise memory and compute, not
//   generalization.
#pragma once

#include <cstdint>
#include <vector>

namespace sublinear::workloads::models::synthetic {

// splitmix64 of one 64-bit key.
[[nodiscard]] inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// A deterministic stream of values keyed by (seed, stream id).
class generator {
 public:
  generator(std::uint64_t seed, std::uint64_t stream) : state_(mix(seed ^ mix(stream + 0x5851F42D4C957F2DULL))) {}
  std::uint64_t next() { return mix(state_++); }
  // Uniform in [lo, hi).
  float uniform(float lo, float hi) {
    const double u = static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(lo + (hi - lo) * u);
  }
  // Uniform integer in [0, n).
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n)); }

 private:
  std::uint64_t state_;
};

// Stream ids, so prototypes, labels and noise never share values.
inline constexpr std::uint64_t kPrototypeStream = 1;
inline constexpr std::uint64_t kBatchStream = 2;

// `classes` prototypes of `features` values each, uniform in [-1, 1).
[[nodiscard]] inline std::vector<float> prototypes(std::uint64_t seed, std::int64_t classes, std::int64_t features) {
  generator g(seed, kPrototypeStream);
  std::vector<float> p(static_cast<std::size_t>(classes * features));
  for (auto& v : p) v = g.uniform(-1.0f, 1.0f);
  return p;
}

// Image prototypes [classes, channels, pixels]: a colour per class and channel, uniform in
// [-1, 1), plus a per-pixel pattern of half that amplitude. The colour survives global
// average pooling, so a small convolutional network separates the classes in a few
// dozen steps; the pattern gives its convolutions something to fit.
[[nodiscard]] inline std::vector<float> image_prototypes(std::uint64_t seed, std::int64_t classes,
                                                         std::int64_t channels, std::int64_t pixels) {
  generator g(seed, kPrototypeStream);
  std::vector<float> p(static_cast<std::size_t>(classes * channels * pixels));
  for (std::int64_t k = 0; k < classes; ++k) {
    for (std::int64_t c = 0; c < channels; ++c) {
      const float colour = g.uniform(-1.0f, 1.0f);
      float* plane = p.data() + (k * channels + c) * pixels;
      for (std::int64_t i = 0; i < pixels; ++i) plane[i] = colour + g.uniform(-0.5f, 0.5f);
    }
  }
  return p;
}

// Labels for batch `index` and, per sample, its class's prototype (`protos`, classes rows
// of `features` values) plus uniform noise in [-noise, noise). Sample rows are contiguous.
struct labelled {
  std::vector<float> values;
  std::vector<float> labels;
};
[[nodiscard]] inline labelled prototype_batch(std::uint64_t seed, std::int64_t index, std::int64_t samples,
                                              std::int64_t classes, const std::vector<float>& protos,
                                              std::int64_t features, float noise) {
  generator g(seed, kBatchStream + 2 * static_cast<std::uint64_t>(index + 1));
  labelled out;
  out.values.resize(static_cast<std::size_t>(samples * features));
  out.labels.resize(static_cast<std::size_t>(samples));
  for (std::int64_t s = 0; s < samples; ++s) {
    const std::int64_t k = g.below(classes);
    out.labels[static_cast<std::size_t>(s)] = static_cast<float>(k);
    for (std::int64_t f = 0; f < features; ++f) {
      out.values[static_cast<std::size_t>(s * features + f)] =
          protos[static_cast<std::size_t>(k * features + f)] + g.uniform(-noise, noise);
    }
  }
  return out;
}

}  // namespace sublinear::workloads::models::synthetic
