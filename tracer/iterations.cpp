// Iteration boundaries and divergence (Note [Iteration detection] in iterations.hpp).
#include "tracer/iterations.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace sublinear::tracer {

namespace {

constexpr std::uint64_t mix(std::uint64_t h, std::uint64_t v) noexcept {
  h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ULL;
  return h ^ (h >> 31);
}

bool significant(event_kind k) noexcept {
  return k == event_kind::alloc || k == event_kind::free || k == event_kind::launch || k == event_kind::memcpy ||
         k == event_kind::memset;
}

}  // namespace

std::uint64_t signer::name_hash(const std::string& name) noexcept {
  std::uint64_t h = 0xCBF29CE484222325ULL;  // FNV-1a
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ULL;
  }
  return h;
}

signer::signer(const trace& t) {
  kernel_hashes_.reserve(t.kernels.size());
  for (const kernel_info& k : t.kernels) kernel_hashes_.push_back(name_hash(k.name));
}

std::uint64_t signer::operator()(const event& e) const noexcept {
  return sign(e, e.kind == event_kind::launch && e.kernel < kernel_hashes_.size() ? kernel_hashes_[e.kernel] : e.kernel);
}

std::uint64_t signer::sign(const event& e, std::uint64_t kernel_hash) noexcept {
  if (!significant(e.kind)) return 0;
  std::uint64_t h = mix(0x5157, static_cast<std::uint64_t>(e.kind));
  switch (e.kind) {
    case event_kind::launch:
      h = mix(h, kernel_hash);
      h = mix(h, (std::uint64_t{e.grid.x} << 32) | e.grid.y);
      h = mix(h, (std::uint64_t{e.grid.z} << 32) | e.block.x);
      h = mix(h, (std::uint64_t{e.block.y} << 32) | e.block.z);
      h = mix(h, e.shared_mem);
      h = mix(h, e.bytes);
      break;
    case event_kind::memcpy:
      h = mix(mix(h, e.bytes), static_cast<std::uint64_t>(e.copy));
      break;
    case event_kind::memset:
      h = mix(mix(h, e.bytes), e.source);
      break;
    default:  // alloc, free
      h = mix(h, e.bytes);
      break;
  }
  return h == 0 ? 1 : h;
}

std::string describe(const trace& t, const event& e) {
  auto d3 = [](const dims& d) {
    return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
  };
  switch (e.kind) {
    case event_kind::launch: {
      const std::string name = e.kernel < t.kernels.size() ? t.kernels[e.kernel].name : "kernel #" + std::to_string(e.kernel);
      return "launch " + name + " grid " + d3(e.grid) + " block " + d3(e.block) + " smem " +
             std::to_string(e.shared_mem) + ", " + std::to_string(e.bytes) + " param bytes";
    }
    case event_kind::alloc: return "alloc " + std::to_string(e.bytes) + " B";
    case event_kind::free: return "free " + std::to_string(e.bytes) + " B";
    case event_kind::memcpy:
      return std::string("memcpy ") + to_string(e.copy) + " " + std::to_string(e.bytes) + " B";
    case event_kind::memset:
      return "memset " + std::to_string(e.bytes) + " B to " + std::to_string(e.source);
    case event_kind::event_record: return "event record";
    case event_kind::event_wait: return "event wait";
    case event_kind::marker: return "iteration marker " + std::to_string(e.address);
  }
  return "unknown event";
}

// ---- period detection -------------------------------------------------------------------------

namespace {

struct candidate {
  std::uint64_t signature = 0;
  double gap = 0;
  std::size_t count = 0;
  double mean_live = 0;
};

// Signatures two iterations have in common (as multisets).
std::size_t common_count(std::vector<std::uint64_t> a, std::vector<std::uint64_t> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::size_t common = 0;
  for (std::size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    if (a[i] < b[j]) {
      ++i;
    } else if (b[j] < a[i]) {
      ++j;
    } else {
      ++common;
      ++i;
      ++j;
    }
  }
  return common;
}

}  // namespace

detected_iterations detect_iterations(const trace& t, const period_options& options) {
  detected_iterations out;
  const signer sign(t);
  std::vector<std::size_t> pos;        // event index of each significant event
  std::vector<std::uint64_t> sig;
  std::vector<std::int64_t> live;      // live bytes just before each significant event
  std::int64_t level = 0;
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const event& e = t.events[i];
    const std::uint64_t s = sign(e);
    if (s == 0) continue;
    pos.push_back(i);
    sig.push_back(s);
    live.push_back(level);
    if (e.kind == event_kind::alloc) level += static_cast<std::int64_t>(e.bytes);
    if (e.kind == event_kind::free) level -= static_cast<std::int64_t>(e.bytes);
  }

  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> occurrences;
  for (std::size_t i = 0; i < sig.size(); ++i) occurrences[sig[i]].push_back(static_cast<std::uint32_t>(i));

  auto within = [&](double a, double b) {
    return std::abs(a - b) <= options.tolerance * b + static_cast<double>(options.slack_events);
  };

  std::vector<candidate> cands;
  std::vector<double> gaps;
  for (const auto& [s, occ] : occurrences) {
    if (occ.size() < 2) continue;
    gaps.clear();
    for (std::size_t k = 1; k < occ.size(); ++k) gaps.push_back(occ[k] - occ[k - 1]);
    std::vector<double> sorted = gaps;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
    const double g = sorted[sorted.size() / 2];
    // Short recurrences are loops inside an iteration (per layer, per parameter), not a
    // training step: even a one-layer step allocates, uploads, runs forward, loss,
    // backward and the optimizer.
    if (g < static_cast<double>(options.min_period_events)) continue;
    if (!std::all_of(gaps.begin(), gaps.end(), [&](double x) { return within(x, g); })) continue;
    double mean = 0;
    for (std::uint32_t o : occ) mean += static_cast<double>(live[o]);
    cands.push_back({s, g, occ.size(), mean / static_cast<double>(occ.size())});
  }
  if (cands.empty()) {
    out.reason = "no event signature recurs at a steady distance (fewer than two iterations, or none alike)";
    return out;
  }

  // The period most regular signatures agree on; ties go to the shorter period.
  std::sort(cands.begin(), cands.end(), [](const candidate& a, const candidate& b) {
    return a.gap != b.gap ? a.gap < b.gap : a.signature < b.signature;
  });
  double period = 0;
  std::size_t best_support = 0;
  for (const candidate& c : cands) {
    std::size_t support = 0;
    for (const candidate& o : cands) support += within(o.gap, c.gap) ? 1 : 0;
    if (support > best_support) {
      best_support = support;
      period = c.gap;
    }
  }
  // The anchor: seen in the most iterations, then at the highest live level (mid-iteration).
  const candidate* anchor = nullptr;
  for (const candidate& c : cands) {
    if (!within(c.gap, period)) continue;
    if (anchor == nullptr || c.count > anchor->count ||
        (c.count == anchor->count && (c.mean_live > anchor->mean_live ||
                                      (c.mean_live == anchor->mean_live && c.signature < anchor->signature)))) {
      anchor = &c;
    }
  }
  out.period = static_cast<std::size_t>(period);
  out.anchor = anchor->signature;
  const std::vector<std::uint32_t>& occ = occurrences[anchor->signature];
  if (occ.size() < 3) {
    out.reason = "the period (" + std::to_string(out.period) + " events) was seen only " +
                 std::to_string(occ.size()) + " times; three occurrences are needed to delimit one iteration";
    return out;
  }

  // One boundary between each pair of anchor occurrences: the end of the live-byte low.
  std::vector<std::size_t> bounds;
  for (std::size_t k = 0; k + 1 < occ.size(); ++k) {
    std::size_t best = occ[k] + 1;
    for (std::size_t p = occ[k] + 1; p <= occ[k + 1]; ++p) {
      if (live[p] <= live[best]) best = p;
    }
    bounds.push_back(best);
  }
  std::vector<std::vector<std::uint64_t>> sigs;
  for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
    out.iterations.push_back({pos[bounds[k]], pos[bounds[k + 1]]});
    sigs.emplace_back(sig.begin() + static_cast<std::ptrdiff_t>(bounds[k]),
                      sig.begin() + static_cast<std::ptrdiff_t>(bounds[k + 1]));
  }
  // Consecutive iterations may differ by a fraction of their events or by the slack,
  // whichever is larger (a short iteration with two logging launches is still itself).
  out.similarity = 1.0;
  for (std::size_t k = 0; k + 1 < sigs.size(); ++k) {
    const std::size_t longer = std::max(sigs[k].size(), sigs[k + 1].size());
    const std::size_t differing = longer - common_count(sigs[k], sigs[k + 1]);
    const double allowed = std::max((1.0 - options.min_similarity) * static_cast<double>(longer),
                                    static_cast<double>(options.slack_events));
    out.similarity = std::min(out.similarity, 1.0 - static_cast<double>(differing) / static_cast<double>(longer));
    if (static_cast<double>(differing) > allowed) {
      out.reason = "iterations " + std::to_string(k) + " and " + std::to_string(k + 1) + " differ in " +
                   std::to_string(differing) + " of " + std::to_string(longer) + " events (at most " +
                   std::to_string(static_cast<std::size_t>(allowed)) + " allowed)";
      out.iterations.clear();
      break;
    }
  }
  return out;
}

std::vector<event_range> iterations_of(const trace& t, const period_options& options) {
  std::vector<event_range> marked = t.marked_iterations();
  if (!marked.empty()) return marked;
  return detect_iterations(t, options).iterations;
}

// ---- divergence ---------------------------------------------------------------------------------

divergence_detector::divergence_detector(const trace& traced, event_range iteration) {
  const signer sign(traced);
  events_.kernels = traced.kernels;
  for (std::size_t i = iteration.begin; i < iteration.end && i < traced.events.size(); ++i) {
    const std::uint64_t s = sign(traced.events[i]);
    if (s == 0) continue;
    expected_.push_back(s);
    events_.events.push_back(traced.events[i]);
  }
}

std::optional<divergence> divergence_detector::feed(const trace& source, const event& e) {
  if (diverged_ || !significant(e.kind)) return std::nullopt;
  // Kernel name hashes of the live trace, cached: its table only grows.
  if (&source != source_) {
    source_ = &source;
    source_hashes_.clear();
  }
  while (source_hashes_.size() < source.kernels.size()) {
    source_hashes_.push_back(signer::name_hash(source.kernels[source_hashes_.size()].name));
  }
  const std::uint64_t s = signer::sign(
      e, e.kind == event_kind::launch && e.kernel < source_hashes_.size() ? source_hashes_[e.kernel] : e.kernel);
  if (position_ < expected_.size() && expected_[position_] == s) {
    ++position_;
    return std::nullopt;
  }
  diverged_ = true;
  divergence d;
  d.index = position_;
  d.expected = position_ < expected_.size() ? describe(events_, events_.events[position_]) : "end of iteration";
  d.seen = describe(source, e);
  return d;
}

std::optional<divergence> divergence_detector::finish() {
  if (diverged_ || position_ == expected_.size()) return std::nullopt;
  diverged_ = true;
  return divergence{position_, describe(events_, events_.events[position_]), "end of iteration"};
}

void divergence_detector::restart() noexcept {
  position_ = 0;
  diverged_ = false;
}

std::optional<divergence> find_divergence(const trace& traced, event_range expected, const trace& live,
                                          event_range seen) {
  divergence_detector d(traced, expected);
  for (std::size_t i = seen.begin; i < seen.end && i < live.events.size(); ++i) {
    if (auto div = d.feed(live, live.events[i])) return div;
  }
  return d.finish();
}

}  // namespace sublinear::tracer
