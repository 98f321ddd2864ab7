// See Note [Online iteration boundaries] in online_iterations.hpp.
#include "tracer/online_iterations.hpp"

#include <algorithm>
#include <utility>

namespace sublinear::tracer {
namespace {

// splitmix64's finaliser: every input bit moves every output bit.
std::uint64_t mix(std::uint64_t h, std::uint64_t v) noexcept {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

std::uint64_t mix_dims(std::uint64_t h, const dims& d) noexcept {
  return mix(mix(mix(h, d.x), d.y), d.z);
}

}  // namespace

std::uint64_t launch_signature(event_kind kind, std::uint64_t kernel, const dims& grid, const dims& block,
                               std::uint32_t shared_mem, std::uint64_t bytes) noexcept {
  std::uint64_t h = mix(static_cast<std::uint64_t>(kind) + 1, kernel);
  h = mix_dims(mix_dims(h, grid), block);
  return mix(mix(h, shared_mem), bytes);
}

online_iterations::online_iterations(online_iteration_options options) : options_(options) {
  if (options_.min_period == 0) options_.min_period = 1;
  if (options_.check_every == 0) options_.check_every = 1;
}

bool online_iterations::on_launch(std::uint64_t signature, std::size_t live_bytes) {
  if (period_ > 0) {
    if (expected_[phase_] == signature) {
      const bool boundary = phase_ == 0;
      phase_ = (phase_ + 1) % period_;
      if (boundary) ++boundaries_;
      return boundary;
    }
    ++lost_;
    restart();  // and search again from this launch
  }
  if (signatures_.size() >= options_.max_history) restart();
  positions_[signature].push_back(signatures_.size());
  signatures_.push_back(signature);
  live_.push_back(live_bytes);
  if (++since_check_ >= options_.check_every) {
    since_check_ = 0;
    search();
  }
  return false;
}

// The smallest p at which the last 2p launches repeat (signature and live bytes), among
// the distances back to earlier launches of the same kernel as the last one.
void online_iterations::search() {
  const std::size_t n = signatures_.size();
  const auto& earlier = positions_[signatures_.back()];
  // Newest first: distances grow. The last entry is the last launch itself.
  for (std::size_t k = earlier.size() - 1; k-- > 0;) {
    const std::size_t p = n - 1 - earlier[k];
    if (2 * p > n) return;
    if (std::max(2 * p, options_.min_evidence) > n) continue;
    if (p >= options_.min_period && repeats(p)) {
      lock(p);
      return;
    }
  }
}

bool online_iterations::repeats(std::size_t p) const noexcept {
  const std::size_t n = signatures_.size();
  const std::size_t span = std::max(2 * p, options_.min_evidence);  // n >= span (search checks)
  for (std::size_t i = n; i-- > n - span + p;) {
    if (signatures_[i] != signatures_[i - p] || live_[i] != live_[i - p]) return false;
  }
  return true;
}

// The boundary is the first launch of the lowest live-byte stretch of the last period,
// taken circularly (the stretch may wrap around the window's edge).
void online_iterations::lock(std::size_t p) {
  const std::size_t n = signatures_.size();
  const std::size_t w = n - p;  // the window [w, n) is one period
  std::size_t low = live_[w];
  for (std::size_t i = w; i < n; ++i) low = std::min(low, live_[i]);
  std::size_t start = 0;  // offset in the window
  for (std::size_t k = 0; k < p; ++k) {
    const std::size_t before = (k + p - 1) % p;
    if (live_[w + k] == low && live_[w + before] != low) {
      start = k;
      break;
    }
  }
  std::vector<std::uint64_t> expected(p);
  for (std::size_t k = 0; k < p; ++k) expected[k] = signatures_[w + (start + k) % p];
  restart();
  expected_ = std::move(expected);
  period_ = p;
  // The next launch, n, sits (p - start) launches after the boundary at w + start.
  phase_ = (p - start) % p;
}

void online_iterations::restart() {
  signatures_.clear();
  live_.clear();
  positions_.clear();
  since_check_ = 0;
  period_ = 0;
  expected_.clear();
  phase_ = 0;
}

}  // namespace sublinear::tracer
