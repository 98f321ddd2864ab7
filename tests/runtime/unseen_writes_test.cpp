// Writes the trace could not see (Note [Unseen writes] in runtime/engine_writes.cpp): a
// kernel whose writes depend on the data leaves its buffers' bytes unchanged in the
// traced iterations, so write observation records it as a reader; once the data changes
// it writes. Training must stay bit-identical under every planner at default settings.
// And a kernel that reads an evicted block through a pointer at an unaligned offset of a
// packed struct (Note [Pointer scan]) gets the block's own bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chain_kernels.hpp"
#include "allocator/caching_allocator.hpp"
#include "device/host/device.hpp"
#include "device/host/host_vmm.hpp"
#include "policy/planner.hpp"
#include "runtime/host/host_runtime.hpp"

namespace sublinear::runtime {
namespace {

// ---- kernels ----------------------------------------------------------------------------------

// out[i] = value * (i % 97) / 97: elements spread over [0, value).
struct spread_params {
  float* out;
  std::int64_t n;
  float value;
};
void spread_body(const device::host::launch_config&, const spread_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) p.out[i] = p.value * static_cast<float>(i % 97) / 97.0f;
}
// out = in * factor - 1 (elements above 1 / (factor - 1) grow from layer to layer, the
// others shrink); with a flag, sets *flag to 1 when an output exceeds `limit` (written
// only on overflow, as a loss scaler's found-inf flag).
struct grow_params {
  float* out;
  const float* in;
  float* flag;         // may be null
  const float* gain;   // may be null: the factor is then `factor`
  std::int64_t n;
  float factor;
  float limit;
};
void grow_body(const device::host::launch_config&, const grow_params& p) {
  bool over = false;
  const float factor = p.gain != nullptr ? p.gain[0] : p.factor;
  for (std::int64_t i = 0; i < p.n; ++i) {
    p.out[i] = p.in[i] * factor - 1.0f;
    over = over || p.out[i] > p.limit;
  }
  if (p.flag != nullptr && over) p.flag[0] = 1.0f;
}
// In place: x = min(x, bound) (writes only elements above the bound).
struct clamp_params {
  float* x;
  std::int64_t n;
  float bound;
};
void clamp_body(const device::host::launch_config&, const clamp_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i)
    if (p.x[i] > p.bound) p.x[i] = p.bound;
}
// In place, masked: x[i] = x[i] * 0.25 where x[i] > threshold.
struct mask_params {
  float* x;
  std::int64_t n;
  float threshold;
};
void mask_body(const device::host::launch_config&, const mask_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i)
    if (p.x[i] > p.threshold) p.x[i] *= 0.25f;
}
// In place, on overflow only: gain += 0.125 when an element of `in` exceeds `limit`.
struct bump_params {
  float* gain;
  const float* in;
  std::int64_t n;
  float limit;
};
void bump_body(const device::host::launch_config&, const bump_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i)
    if (p.in[i] > p.limit) {
      p.gain[0] += 0.125f;
      return;
    }
}
// If the flag is set: halve the loss scale and clear the flag (both written only then).
struct consume_params {
  float* flag;
  float* loss_scale;
};
void consume_body(const device::host::launch_config&, const consume_params& p) {
  if (p.flag[0] != 0.0f) {
    p.loss_scale[0] *= 0.5f;
    p.flag[0] = 0.0f;
  }
}
// acc[i % 64] += in[i] * 0.001 * loss_scale
struct accumulate_params {
  float* acc;
  const float* in;
  const float* loss_scale;
  std::int64_t n;
};
void accumulate_body(const device::host::launch_config&, const accumulate_params& p) {
  const float s = p.loss_scale[0] * 0.001f;
  for (std::int64_t i = 0; i < p.n; ++i) p.acc[i % 64] += p.in[i] * s;
}
// accumulate_body's arithmetic on a 4-byte-packed struct: `in` sits at offset 12, which
// an 8-byte-aligned scan never reads as a word.
#pragma pack(push, 4)
struct packed_accumulate_params {
  float* acc;                // offset 0
  std::int32_t n;            // offset 8
  const float* in;           // offset 12
  const float* loss_scale;   // offset 20
};
#pragma pack(pop)
static_assert(offsetof(packed_accumulate_params, in) == 12);
void packed_accumulate_body(const device::host::launch_config&, const packed_accumulate_params& p) {
  const float s = p.loss_scale[0] * 0.002f;
  for (std::int32_t i = 0; i < p.n; ++i) p.acc[(i + 7) % 64] += p.in[i] * s;
}

template <class P, void (*F)(const device::host::launch_config&, const P&)>
const device::host::kernel& reg(const char* name, std::initializer_list<device::host::param_info> layout) {
  static const device::host::kernel& k = device::host::register_kernel<P, F>(name, layout);
  return k;
}
const device::host::kernel& spread_kernel() {
  return reg<spread_params, spread_body>("test_unseen_spread", {SUBLINEAR_PARAM(spread_params, out),
                                                               SUBLINEAR_PARAM(spread_params, n),
                                                               SUBLINEAR_PARAM(spread_params, value)});
}
const device::host::kernel& grow_kernel() {
  return reg<grow_params, grow_body>(
      "test_unseen_grow", {SUBLINEAR_PARAM(grow_params, out), SUBLINEAR_PARAM(grow_params, in),
                           SUBLINEAR_PARAM(grow_params, flag), SUBLINEAR_PARAM(grow_params, gain),
                           SUBLINEAR_PARAM(grow_params, n), SUBLINEAR_PARAM(grow_params, factor),
                           SUBLINEAR_PARAM(grow_params, limit)});
}
const device::host::kernel& clamp_kernel() {
  return reg<clamp_params, clamp_body>("test_unseen_clamp", {SUBLINEAR_PARAM(clamp_params, x),
                                                             SUBLINEAR_PARAM(clamp_params, n),
                                                             SUBLINEAR_PARAM(clamp_params, bound)});
}
const device::host::kernel& mask_kernel() {
  return reg<mask_params, mask_body>("test_unseen_mask", {SUBLINEAR_PARAM(mask_params, x),
                                                          SUBLINEAR_PARAM(mask_params, n),
                                                          SUBLINEAR_PARAM(mask_params, threshold)});
}
const device::host::kernel& bump_kernel() {
  return reg<bump_params, bump_body>("test_unseen_bump", {SUBLINEAR_PARAM(bump_params, gain),
                                                          SUBLINEAR_PARAM(bump_params, in),
                                                          SUBLINEAR_PARAM(bump_params, n),
                                                          SUBLINEAR_PARAM(bump_params, limit)});
}
const device::host::kernel& consume_kernel() {
  return reg<consume_params, consume_body>(
      "test_unseen_consume", {SUBLINEAR_PARAM(consume_params, flag), SUBLINEAR_PARAM(consume_params, loss_scale)});
}
const device::host::kernel& accumulate_kernel() {
  return reg<accumulate_params, accumulate_body>(
      "test_unseen_accumulate",
      {SUBLINEAR_PARAM(accumulate_params, acc), SUBLINEAR_PARAM(accumulate_params, in),
       SUBLINEAR_PARAM(accumulate_params, loss_scale), SUBLINEAR_PARAM(accumulate_params, n)});
}
// The packed struct is one parameter of 28 bytes, as a by-value struct is to a GPU.
const device::host::kernel& packed_accumulate_kernel() {
  return reg<packed_accumulate_params, packed_accumulate_body>("test_unseen_packed_accumulate",
                                                               {{0, sizeof(packed_accumulate_params)}});
}

// ---- a chain "model" ---------------------------------------------------------------------------

enum class hazard {
  clamp,       // each activation is clamped in place right after it is made
  mask,        // each activation is scaled down in place, masked, once the next one is made from it
  flag,        // each layer sets a shared flag on overflow; after the forward it halves the loss scale
  packed,      // the backward reads each activation through a pointer at an unaligned offset first
  gain,        // every layer scales by a shared gain, which the middle layer raises on overflow
};

constexpr int kLayers = 10;
constexpr std::int64_t kFloats = 64 * 1024;  // 256 KiB activations: whole host pages
constexpr int kIterations = 7;               // 0-1 traced, 2 validated, 3-6 steady
constexpr float kBound = 12.0f;              // no element reaches it while tracing

// The first activation's spread: every element under kBound through all layers while the
// engine traces and validates (iterations 0 to 2: all shrink), half of them growing past it
// from iteration 4 on.
float spread_for(int iteration) { return iteration < 4 ? 1.0f : 20.0f; }

struct chain {
  device::host_vmm vmm{device::host_vmm_options{64 * 1024, std::size_t{256} << 20}};
  device::host::device dev;
  allocator::caching_allocator alloc{vmm, dev, test::small_page_options()};
  float* acc = nullptr;
  float* flag = nullptr;
  float* loss_scale = nullptr;
  float* gain = nullptr;


  chain() {
    acc = static_cast<float*>(alloc.allocate(64 * sizeof(float), nullptr));
    flag = static_cast<float*>(alloc.allocate(sizeof(float), nullptr));
    loss_scale = static_cast<float*>(alloc.allocate(sizeof(float), nullptr));
    gain = static_cast<float*>(alloc.allocate(sizeof(float), nullptr));
    dev.memset_async(acc, 0, 64 * sizeof(float), nullptr);
    dev.memset_async(flag, 0, sizeof(float), nullptr);
    const float one = 1.0f;
    const float factor = 1.1f;
    dev.synchronize();
    std::memcpy(loss_scale, &one, sizeof one);
    std::memcpy(gain, &factor, sizeof factor);
  }
  ~chain() {
    dev.synchronize();
    alloc.deallocate(acc);
    alloc.deallocate(flag);
    alloc.deallocate(loss_scale);
    alloc.deallocate(gain);
  }

  float* make() { return static_cast<float*>(alloc.allocate(kFloats * sizeof(float), nullptr)); }

  void iteration(hazard h, int it) {
    std::vector<float*> acts;
    float* first = make();
    spread_params sp{first, kFloats, spread_for(it)};
    dev.launch(spread_kernel(), {}, nullptr, &sp);
    acts.push_back(first);
    for (int l = 1; l < kLayers; ++l) {
      float* next = make();
      grow_params gp{next, acts.back(), h == hazard::flag ? flag : nullptr, h == hazard::gain ? gain : nullptr,
                     kFloats, 1.1f, kBound};
      dev.launch(grow_kernel(), {}, nullptr, &gp);
      if (h == hazard::gain && l == kLayers / 2) {
        bump_params bp{gain, next, kFloats, kBound};
        dev.launch(bump_kernel(), {}, nullptr, &bp);
      }
      if (h == hazard::clamp) {
        clamp_params cp{next, kFloats, kBound};
        dev.launch(clamp_kernel(), {}, nullptr, &cp);
      }
      if (h == hazard::mask) {
        mask_params mp{acts.back(), kFloats, kBound};
        dev.launch(mask_kernel(), {}, nullptr, &mp);
      }
      acts.push_back(next);
    }
    if (h == hazard::flag) {
      consume_params cp{flag, loss_scale};
      dev.launch(consume_kernel(), {}, nullptr, &cp);
    }
    for (int l = kLayers - 1; l >= 0; --l) {
      float* a = acts[static_cast<std::size_t>(l)];
      if (h == hazard::packed) {
        packed_accumulate_params pp{acc, static_cast<std::int32_t>(kFloats), a, loss_scale};
        dev.launch(packed_accumulate_kernel(), {}, nullptr, &pp);
      }
      accumulate_params ap{acc, a, loss_scale, kFloats};
      dev.launch(accumulate_kernel(), {}, nullptr, &ap);
      alloc.deallocate(a);
    }
    dev.synchronize();
  }

  std::vector<float> result() {
    dev.synchronize();
    std::vector<float> out(acc, acc + 64);
    out.push_back(*flag);
    out.push_back(*loss_scale);
    out.push_back(*gain);
    return out;
  }
};

struct run {
  std::vector<float> result;
  engine::plan_link link;
  std::vector<iteration_report> reports;
  std::string plan_error;
  std::size_t evictions = 0;
  std::size_t unseen_writes = 0;
  std::size_t check_waits = 0;
  std::size_t settle_waits = 0;
};

// Replaces the plan's evictions by one per activation, each released after its last
// forward use and regenerated by the launch that produced it: consecutive activations are
// released one launch apart, and each one's recipe reads the one before in place.
void evict_every_activation(const policy::iteration& g, policy::plan& p) {
  p.evictions.clear();
  p.retentions.clear();
  p.packs.clear();
  p.offloads.clear();
  for (policy::buffer_id b = 0; b < g.buffers.size(); ++b) {
    if (g.buffers[b].persistent() || g.buffers[b].size != kFloats * sizeof(float)) continue;
    std::vector<policy::launch_id> uses;
    policy::launch_id producer = policy::none;
    for (policy::launch_id l = 0; l < g.launches.size(); ++l) {
      const auto& t = g.launches[l].touched;
      if (!std::binary_search(t.begin(), t.end(), b)) continue;
      uses.push_back(l);
      const auto& w = g.launches[l].written;
      if (producer == policy::none && std::binary_search(w.begin(), w.end(), b)) producer = l;
    }
    // The widest gap between two uses: from the forward's last to the backward's first.
    std::size_t gap = 0;
    for (std::size_t k = 1; k < uses.size(); ++k)
      if (uses[k] - uses[k - 1] > uses[gap + 1] - uses[gap]) gap = k - 1;
    if (producer == policy::none || uses.size() < 2 || uses[gap + 1] - uses[gap] < 2) continue;
    policy::eviction e;
    e.target = b;
    e.evict_after = uses[gap];
    e.restore_before = uses[gap + 1];
    e.recipe = {producer};
    p.evictions.push_back(e);
  }
  p.recomputed_launches = p.evictions.size();
}

struct train_options {
  validate_mode validate = validate_mode::first;
  std::size_t hash_lag = 0;       // each hash answers ready() false that many times (set_hash_lag)
  bool every_activation = false;  // evict_every_activation
  bool fixed_costs = false;       // launches cost their bytes: the same plan every run
  bool copies_at_once = false;    // input copies wait for the stream (copy_inputs_at_once)
  std::size_t host_budget = 0;    // SUBLINEAR_HOST_BUDGET (0: the default)
  std::function<void(const policy::iteration&, policy::plan&)> amend{};  // instead of every_activation's
  int diverge_at = -1;            // an extra launch begins that iteration
  int more_iterations = 0;        // beyond kIterations
};

run train(hazard h, const std::string& policy, const train_options& t = {}) {
  chain m;
  std::unique_ptr<host_runtime> rt;
  if (!policy.empty()) {
    engine_options o;  // default settings but the budget and the planner
    o.config.budget = policy::parse_budget("0.6x");
    o.config.policy = policy;
    o.config.validate = t.validate;
    o.config.log = log_level::error;
    if (const char* l = std::getenv("UNSEEN_LOG")) o.config.log = parse_log_level("UNSEEN_LOG", l);
    o.device_capacity = std::size_t{256} << 20;
    o.config.host_budget = t.host_budget;
    if (t.every_activation) {
      o.config.multi_pass = false;
      o.amend_plan = evict_every_activation;
    }
    if (t.amend) o.amend_plan = t.amend;
    host_runtime_options ro;
    ro.time_launches = !t.fixed_costs;
    rt = std::make_unique<host_runtime>(m.dev, m.alloc, o, ro);
    rt->replay_device().set_hash_lag(t.hash_lag);
    rt->replay_device().copy_inputs_at_once(t.copies_at_once);
  }
  for (int it = 0; it < kIterations + t.more_iterations; ++it) {
    if (it == t.diverge_at) {  // a launch the trace never saw: the engine traces and plans again
      float* extra = m.make();
      spread_params sp{extra, kFloats, 1.0f};
      m.dev.launch(spread_kernel(), {}, nullptr, &sp);
      m.alloc.deallocate(extra);
    }
    m.iteration(h, it);
    if (rt) rt->mark_iteration();
  }
  run out;
  out.result = m.result();
  if (rt) {
    out.reports = rt->get().iterations();
    out.plan_error = rt->get().plan_error();
    out.link = rt->get().planned_link();
    for (const auto& r : out.reports) {
      out.evictions += r.evictions;
      out.unseen_writes += r.unseen_writes;
      out.check_waits += r.check_waits;
      out.settle_waits += r.settle_waits;
    }
  }
  return out;
}

// Every planner but `none`: the parameters equal training without sublinear bit for bit,
// most planners evict, and with `writes_unseen` the engine found such writes (it keeps
// those buffers and plans again, which may then leave the budget infeasible).
void expect_bit_identical_under_every_planner(hazard h, bool writes_unseen, std::size_t hash_lag = 0,
                                              bool copies_at_once = false) {
  const run baseline = train(h, "");
  std::size_t evicting = 0;
  std::size_t unseen = 0;
  for (std::string_view name : policy::planner_names()) {
    if (name == "none") continue;
    SCOPED_TRACE(std::string(name));
    const run r = train(h, std::string(name), {.hash_lag = hash_lag, .copies_at_once = copies_at_once});
    EXPECT_EQ(r.result, baseline.result) << "the parameters differ from training without sublinear";
    if (r.evictions == 0) continue;
    ++evicting;
    unseen += r.unseen_writes;
    for (const auto& rep : r.reports) EXPECT_FALSE(rep.diverged) << "iteration " << rep.index << ": " << rep.divergence;
  }
  EXPECT_GE(evicting, 5u) << "most planners must evict in this chain at 0.6x";
  if (writes_unseen) {
    EXPECT_GT(unseen, 0u) << "no write the trace did not see was found";
  }
}

TEST(UnseenWrites, AnInPlaceClampThatStartsClippingAfterTracingTrainsBitIdentically) {
  expect_bit_identical_under_every_planner(hazard::clamp, true);
}

TEST(UnseenWrites, AMaskedInPlaceUpdateOfARecipesInputTrainsBitIdentically) {
  expect_bit_identical_under_every_planner(hazard::mask, true);
}

TEST(UnseenWrites, AnOverflowFlagWrittenOnlyOnOverflowTrainsBitIdentically) {
  expect_bit_identical_under_every_planner(hazard::flag, true);
}

// Input copies are queued on the stream on the host device (and on CUDA with pinned
// memory); a device that makes them at once, waiting for the stream, recovers the same.
TEST(UnseenWrites, InputCopiesMadeAtOnceRecoverAsQueuedOnesDo) {
  for (hazard h : {hazard::clamp, hazard::mask, hazard::flag}) {
    SCOPED_TRACE(static_cast<int>(h));
    expect_bit_identical_under_every_planner(h, true, 0, true);
  }
}

// What is caught, not undone: a block that outlives the iteration (the gain, as a
// parameter) changed by a kernel the trace did not see writing it, after activations
// whose recipes read it were released. Their regeneration cannot give the bytes back; the
// run stops with an error naming the buffer instead of training on other values, and
// with SUBLINEAR_VALIDATE=always, which keeps copies, it trains bit-identically.
TEST(UnseenWrites, AParameterChangedAfterTheReleaseOfWhatItsRecipesReadStopsTheRunOrIsUndoneByValidation) {
  const run baseline = train(hazard::gain, "");
  for (const char* policy : {"chain", "reforward"}) {
    SCOPED_TRACE(policy);
    try {
      const run r = train(hazard::gain, policy);
      ADD_FAILURE() << "trained without an error; the parameters are "
                    << (r.result == baseline.result ? "the same" : "DIFFERENT");
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("came back with other bytes than it had when it was evicted"),
                std::string::npos)
          << e.what();
    }
    const run validated = train(hazard::gain, policy, {.validate = validate_mode::always});
    EXPECT_EQ(validated.result, baseline.result);
    EXPECT_GT(validated.evictions, 0u);
  }
}

// Note [Host budget]: the input copies count against SUBLINEAR_HOST_BUDGET. With room for
// all of them a masked update after the release is undone as without a bound, holding no
// more than the bound; with room for none the copies are not made, and the same update
// stops the run with an error naming the host budget (caught, not undone).
TEST(UnseenWrites, InputCopiesStayWithinTheHostBudgetAndWithoutRoomTheWriteIsCaughtNamingIt) {
  const run baseline = train(hazard::mask, "");
  const train_options unbounded{.every_activation = true, .fixed_costs = true};
  const run free = train(hazard::mask, "chain", unbounded);
  ASSERT_EQ(free.result, baseline.result);
  std::size_t copied = 0, held = 0;
  for (const auto& r : free.reports) {
    copied += r.copied_bytes;
    held = std::max(held, r.host_held_bytes);
    EXPECT_EQ(r.uncopied_bytes, 0u) << r.index;
  }
  ASSERT_GT(copied, 0u) << "the rig must copy recipe inputs";
  ASSERT_GT(free.unseen_writes, 0u) << "the masked update must be read from a copy";

  train_options exact = unbounded;
  exact.host_budget = held;
  const run fits = train(hazard::mask, "chain", exact);
  EXPECT_EQ(fits.result, baseline.result);
  EXPECT_GT(fits.unseen_writes, 0u);
  for (const auto& r : fits.reports) {
    EXPECT_LE(r.host_held_bytes, held) << r.index;
    EXPECT_EQ(r.uncopied_bytes, 0u) << r.index;
  }

  train_options none = unbounded;
  none.host_budget = 1;
  try {
    const run r = train(hazard::mask, "chain", none);
    ADD_FAILURE() << "trained without an error; the parameters are "
                  << (r.result == baseline.result ? "the same" : "DIFFERENT");
  } catch (const error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("came back with other bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("SUBLINEAR_HOST_BUDGET"), std::string::npos) << what;
  }
}

// Every eviction evict_every_activation makes becomes an offload with the same points.
void offload_every_activation(const policy::iteration& g, policy::plan& p) {
  evict_every_activation(g, p);
  for (const policy::eviction& e : p.evictions) {
    policy::offload o;
    o.target = e.target;
    o.evict_after = e.evict_after;
    o.release_before = e.evict_after + 1;
    o.fetch_after = e.restore_before - 1;
    o.restore_before = e.restore_before;
    p.offloads.push_back(o);
  }
  p.evictions.clear();
  p.recomputed_launches = 0;
}

// Note [Host budget]: a plan made again (here after a divergence) whose pool does not fit
// beside the input copies the first plan kept gets their room: they are given back and
// the pool is made, where keeping them would have refused the offloads.
TEST(UnseenWrites, APlanMadeAgainTakesTheInputCopiesRoomForItsPool) {
  int plans = 0;
  train_options t{.fixed_costs = true};
  t.amend = [&plans](const policy::iteration& g, policy::plan& p) {
    if (plans++ == 0) {
      evict_every_activation(g, p);  // recompute: its releases copy recipe inputs
    } else {
      offload_every_activation(g, p);
    }
  };
  t.diverge_at = 3;  // traced again in 4 and 5, planned again after 5
  t.more_iterations = 3;
  const run baseline = train(hazard::mask, "", t);
  const run free = train(hazard::mask, "chain", t);
  ASSERT_EQ(plans, 2) << "the divergence must make the engine plan again";
  ASSERT_GT(free.link.host_bytes, 0u);
  std::size_t copies = 0;
  for (const auto& r : free.reports) copies = std::max(copies, r.host_held_bytes);
  ASSERT_GT(copies, 0u) << "the first plan's releases must copy inputs";

  plans = 0;
  train_options tight = t;
  tight.host_budget = free.link.host_bytes;  // the pool fits, but not beside the copies
  const run r = train(hazard::mask, "chain", tight);
  EXPECT_EQ(r.result, baseline.result);
  EXPECT_EQ(r.link.refused, "");
  EXPECT_EQ(r.link.host_bytes, free.link.host_bytes);
  std::size_t offloads = 0;
  for (const auto& it : r.reports) {
    EXPECT_LE(it.host_held_bytes, tight.host_budget) << it.index;
    offloads += it.offloads;
  }
  EXPECT_GT(offloads, 0u) << "the second plan's offloads run";
}

// Note [Unsettled releases]: on a GPU the stream is often far behind the host, so a
// release's hashes are not ready when the next launches come. Here each hash says it is
// not ready for its first 3 queries (the releases settle a few launches later) or for
// far more than an iteration asks (they settle where their buffers are needed, waiting):
// every unseen write is still found before the pages go, and training stays bit-identical.
TEST(UnsettledReleases, WithTheStreamBehindTheUnseenWritesAreFoundBeforeThePagesGo) {
  for (std::size_t lag : {std::size_t{3}, std::size_t{1} << 30}) {
    SCOPED_TRACE("hash lag " + std::to_string(lag));
    for (hazard h : {hazard::clamp, hazard::mask, hazard::flag}) {
      SCOPED_TRACE(static_cast<int>(h));
      expect_bit_identical_under_every_planner(h, true, lag);
    }
  }
}

// Releases that cannot settle before their buffers are needed settle there: the plan's
// evictions as when the stream keeps up (launches cost their bytes, so both runs plan
// alike), the same parameters, the budget held, and the waits counted.
TEST(UnsettledReleases, ReleasesTheStreamHasNotReachedSettleWhereTheirBuffersAreNeeded) {
  for (hazard h : {hazard::clamp, hazard::mask}) {
    SCOPED_TRACE(static_cast<int>(h));
    const run baseline = train(h, "");
    const run keeping_up = train(h, "reforward", {.fixed_costs = true});
    const run behind = train(h, "reforward", {.hash_lag = std::size_t{1} << 30, .fixed_costs = true});
    EXPECT_EQ(keeping_up.result, baseline.result);
    EXPECT_EQ(behind.result, baseline.result);
    ASSERT_GT(keeping_up.evictions, 0u);
    EXPECT_GT(keeping_up.unseen_writes, 0u);
    EXPECT_GT(behind.unseen_writes, 0u);
    EXPECT_GT(behind.settle_waits, 0u) << "settling a release the stream has not reached waits";
    // The iteration where the unseen writes are found keeps those buffers, and its budget
    // may be lifted for the rest of it (Note [Unseen writes]); elsewhere it holds.
    ASSERT_EQ(behind.reports.size(), keeping_up.reports.size());
    for (std::size_t i = 0; i < behind.reports.size(); ++i) {
      const iteration_report& rep = behind.reports[i];
      SCOPED_TRACE("iteration " + std::to_string(rep.index));
      EXPECT_FALSE(rep.diverged) << rep.divergence;
      // The plan's evictions, where the valve did not add its own (pages that go later
      // may make it do so, and a loaded machine's timing too).
      const iteration_report& up = keeping_up.reports[i];
      if (!rep.budget_lifted && !up.budget_lifted && rep.pressure_evictions == 0 && up.pressure_evictions == 0) {
        EXPECT_EQ(rep.evictions, up.evictions);
      }
      if (rep.budget > 0 && !rep.budget_lifted) {
        EXPECT_LE(rep.peak_mapped, rep.budget);
      }
    }
  }
}

// Every activation released one launch after the one before, each regenerated from the
// one before: with the stream far behind, an activation's release is still queued when
// the next one's release checks what its recipe reads, so that check does not hash it
// (Note [Unsettled releases]: its own hashes cover it). The clamp's unseen writes are
// found and training stays bit-identical, as when the stream keeps up.
TEST(UnsettledReleases, ARecipeReadingABufferWhoseReleaseIsQueuedIsCheckedByThatBuffersHashes) {
  const run baseline = train(hazard::clamp, "");
  const run keeping_up = train(hazard::clamp, "reforward", {.every_activation = true});
  const run behind = train(hazard::clamp, "reforward", {.hash_lag = std::size_t{1} << 30, .every_activation = true});
  EXPECT_EQ(keeping_up.result, baseline.result);
  EXPECT_EQ(behind.result, baseline.result);
  EXPECT_GT(keeping_up.evictions, 0u);
  EXPECT_GT(behind.evictions, 0u);
  EXPECT_GT(keeping_up.unseen_writes, 0u);
  EXPECT_GT(behind.unseen_writes, 0u);
  for (const auto& rep : behind.reports) EXPECT_FALSE(rep.diverged) << rep.divergence;
}

TEST(UnseenPointers, AKernelReadingAnActivationThroughAnUnalignedPointerInAPackedStructTrainsBitIdentically) {
  expect_bit_identical_under_every_planner(hazard::packed, false);
}

}  // namespace
}  // namespace sublinear::runtime
