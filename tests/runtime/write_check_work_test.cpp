// The write checks' work a plan predicts (Note [Write check work] in
// runtime/write_check_work.hpp): the bytes a steady iteration of each host model hashes,
// counted from the plan before any planned iteration ran, and the hash cost probe. No
// wall-time thresholds: counts are compared with counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "device/host/device.hpp"
#include "device/host/host_vmm.hpp"
#include "policy/plan.hpp"
#include "runtime/engine.hpp"
#include "runtime/host/host_runtime.hpp"
#include "runtime/write_check_work.hpp"
#include "workloads/host_session.hpp"
#include "workloads/models/registry.hpp"
#include "workloads/training.hpp"

namespace sublinear::runtime {
namespace {

using workloads::models::model_kind;

struct outcome {
  engine::plan_time time;
  std::vector<iteration_report> reports;
  std::string plan_error;
};

// `copies_at_once`: host_replay_device::copy_inputs_at_once; `fixed_costs`: launches cost
// their bytes (host_runtime_options::time_launches off), so every run plans alike.
outcome train(model_kind kind, const std::string& budget, int iterations = 5, bool copies_at_once = false,
              bool fixed_costs = false) {
  workloads::models::model_config c;
  c.kind = kind;
  if (kind == model_kind::resnet) c.depth = 56;
  if (kind == model_kind::lstm) c.seq_len = 128;
  c = workloads::models::with_defaults(c);
  workloads::host_session_options so;
  so.scaled_size_classes = true;
  workloads::host_session session(so);
  use_engine_allocator_settings(session.allocator());
  auto ctx = session.make_context();
  auto model = workloads::models::make_model(c);
  model->init(ctx, 7);
  engine_options o;
  o.config.budget = policy::parse_budget(budget);
  o.config.policy = "reforward";
  o.config.log = log_level::error;
  o.device_capacity = session.vmm().physical_capacity();
  host_runtime_options ro;
  ro.time_launches = !fixed_costs;
  host_runtime rt(session.device(), session.allocator(), o, ro);
  rt.replay_device().copy_inputs_at_once(copies_at_once);
  workloads::training_options to;
  to.iterations = iterations;
  to.seed = 7;
  to.on_iteration_end = [&](const workloads::iteration_figures&) { rt.mark_iteration(); };
  workloads::train(ctx, *model, to);
  outcome out;
  out.time = rt.get().predicted_time();
  out.reports = rt.get().iterations();
  out.plan_error = rt.get().plan_error();
  model->release();
  return out;
}

// Each model's plan says, before it runs, how many bytes a steady iteration hashes and
// copies, and how often it waits for the stream; a steady iteration that ran the plan as
// planned (no valve eviction, no unseen write) does exactly that. Where a restore runs early (a prefetch: the LSTM's, now and
// then) a hash may fall on the other side of a launch: within 1%. On the ResNet the
// valve, under pressure now and then (the stream workers free blocks late), may also hash
// a candidate it then keeps (one whose production was not hashed) without evicting
// anything: a few blocks more, each about 1% of what the iteration hashes, never fewer.
TEST(WriteCheckWork, ThePlanCountsTheBytesEachSteadyIterationHashes) {
  for (model_kind kind : {model_kind::lstm, model_kind::resnet, model_kind::transformer}) {
    SCOPED_TRACE(std::string(workloads::models::to_string(kind)));
    const outcome r = train(kind, "0.5x");
    ASSERT_EQ(r.plan_error, "");
    const write_check_work& w = r.time.at_plan.checks;
    EXPECT_EQ(w.hashes, r.time.checks.hashes);
    std::size_t compared = 0, exact = 0;
    const auto near = [](std::size_t got, std::size_t want) {
      const std::size_t d = got > want ? got - want : want - got;
      return d <= want / 100;
    };
    for (const iteration_report& it : r.reports) {
      if (it.state != engine_state::steady || it.diverged || it.pressure_evictions != 0 || it.unseen_writes != 0)
        continue;
      SCOPED_TRACE("iteration " + std::to_string(it.index) + ", prefetched " + std::to_string(it.prefetched));
      ++compared;
      if (kind == model_kind::resnet) {
        EXPECT_GE(it.hashed_bytes, w.hashed_bytes);
        EXPECT_LE(it.hashed_bytes, w.hashed_bytes + w.hashed_bytes / 20);
        EXPECT_EQ(it.copied_bytes, w.copied_bytes);
        EXPECT_EQ(it.check_waits, w.waits);
      } else if (it.prefetched != 0) {
        EXPECT_TRUE(near(it.hashed_bytes, w.hashed_bytes)) << it.hashed_bytes << " against " << w.hashed_bytes;
        EXPECT_TRUE(near(it.copied_bytes, w.copied_bytes)) << it.copied_bytes << " against " << w.copied_bytes;
        EXPECT_TRUE(near(it.check_waits, w.waits)) << it.check_waits << " against " << w.waits;
      } else {
        EXPECT_EQ(it.hashed_bytes, w.hashed_bytes);
        EXPECT_EQ(it.copied_bytes, w.copied_bytes);
        EXPECT_EQ(it.check_waits, w.waits);
      }
      exact += it.hashed_bytes == w.hashed_bytes && it.copied_bytes == w.copied_bytes &&
                       it.check_waits == w.waits
                   ? 1
                   : 0;
    }
    EXPECT_GT(compared, 0u) << "no steady iteration ran the plan as planned";
    std::printf("write checks, %s: %zu of %zu steady iterations hashed, copied and waited exactly as the plan says\n",
                std::string(workloads::models::to_string(kind)).c_str(), exact, compared);
    if (w.hashes > 0) {
      EXPECT_EQ(r.time.hash.error, "");
      EXPECT_GT(r.time.hash.byte_s, 0.0) << "the probe measured the host device's hash";
      EXPECT_EQ(r.time.at_plan.check_s, r.time.hash.cost_s(w));
      EXPECT_EQ(r.time.next.check_s, 0.0) << "a steady iteration's cost per launch holds its checks";
    }
  }
}

// A device that copies recipe inputs at once (CUDA without pinned memory) waits for the
// stream once at each release that copies, and the plan counts those waits too.
// Launches cost their bytes, so both runs plan alike: the same copies, and as many more
// waits as releases that copy.
TEST(WriteCheckWork, CopiesMadeAtOnceAreWaitsThePlanCounts) {
  const outcome queued = train(model_kind::resnet, "0.5x", 5, false, true);
  const outcome at_once = train(model_kind::resnet, "0.5x", 5, true, true);
  ASSERT_EQ(queued.plan_error, "");
  ASSERT_EQ(at_once.plan_error, "");
  const write_check_work& q = queued.time.at_plan.checks;
  const write_check_work& w = at_once.time.at_plan.checks;
  ASSERT_GT(w.copies, 0u) << "the ResNet's releases copy inputs a kernel reads before the regeneration";
  EXPECT_EQ(w.copies, q.copies);
  EXPECT_EQ(w.hashes, q.hashes);
  EXPECT_GT(w.waits, q.waits) << "a release that copies waits where copies are made at once";
  EXPECT_LE(w.waits, q.waits + w.copies);
  std::size_t compared = 0;
  for (const iteration_report& it : at_once.reports) {
    if (it.state != engine_state::steady || it.diverged || it.pressure_evictions != 0 || it.unseen_writes != 0)
      continue;
    ++compared;
    EXPECT_EQ(it.copied_bytes, w.copied_bytes);
    EXPECT_EQ(it.check_waits, w.waits);
  }
  EXPECT_GT(compared, 0u) << "no steady iteration ran the plan as planned";
}

// The LSTM's input sequence is read by every step's recipe, so it is hashed about once a
// step: most of what its checks hash, and what its replays wait for.
TEST(WriteCheckWork, AnLstmsInputSequenceIsHashedAboutOnceAStep) {
  const outcome r = train(model_kind::lstm, "0.5x", 3);
  ASSERT_EQ(r.plan_error, "");
  const write_check_work& w = r.time.at_plan.checks;
  EXPECT_GT(w.hashes, 128u);
  EXPECT_GT(w.hashed_bytes, 128u * 128 * 32 * sizeof(float) / 2);
  // Later steps read it after a release, so the replays hash it again and wait.
  EXPECT_GT(w.waits, 0u);
}

// Hashes of a block no launch and no replay touched since its last one are not taken
// again; the release's comparison waits only for a new one.
TEST(WriteCheckWork, AHashIsTakenAgainOnlyAfterALaunchOrAReplayTouchedTheBlock) {
  // L0 writes a | L1 reads a, writes b | L2 writes c | L3 reads b | L4 reads a, b. b is
  // evicted after L1 and regenerated by replaying L1 before L3.
  policy::iteration it;
  it.granularity = 4096;
  const auto buffer = [&](std::size_t size, policy::launch_id from, policy::launch_id to) {
    policy::buffer b;
    b.size = size;
    b.alloc_index = it.buffers.size();
    b.alloc_at = from;
    b.free_at = to;
    it.buffers.push_back(b);
    return static_cast<policy::buffer_id>(it.buffers.size() - 1);
  };
  const auto launch = [&](std::vector<policy::buffer_id> touched, std::vector<policy::buffer_id> written) {
    policy::launch l;
    l.touched = std::move(touched);
    l.written = std::move(written);
    it.launches.push_back(std::move(l));
  };
  const policy::buffer_id a = buffer(4096, 0, 5);
  const policy::buffer_id b = buffer(8192, 1, 5);
  const policy::buffer_id c = buffer(4096, 2, 3);
  launch({a}, {a});
  launch({a, b}, {b});
  launch({c}, {c});
  launch({b}, {});
  launch({a, b}, {});
  policy::plan p;
  policy::eviction e;
  e.target = b;
  e.evict_after = 1;
  e.restore_before = 3;
  e.recipe = {1};
  p.evictions.push_back(e);
  const write_check_index ix = index_write_checks(p, it);
  ASSERT_EQ(ix.guarded_inputs[0].size(), 1u);
  EXPECT_EQ(ix.guarded_inputs[0][0].first, a);
  EXPECT_EQ(ix.hash_before_at[1], std::vector<policy::buffer_id>{a});
  EXPECT_EQ(ix.hash_after_at[1], (std::vector<policy::buffer_id>{a, b}));
  const write_check_work w = count_write_checks(ix, p, it);
  // a before L1 and after it (L1 touched it); b after L1; at the release after L1 both
  // repeat those; before L3 nothing touched a since the release: no hash, no wait; the
  // replay's target b once.
  EXPECT_EQ(w.hashes, 4u);
  EXPECT_EQ(w.hashed_bytes, 4096u + 4096u + 8192u + 8192u);
  EXPECT_EQ(w.waits, 0u) << "the release's hashes are repeats: nothing new to wait for";
  // A launch touching a between the release and the regeneration: a is hashed again
  // before the replay, and the engine waits for it.
  it.launches[2].touched = {a, c};
  std::sort(it.launches[2].touched.begin(), it.launches[2].touched.end());
  const write_check_work again = count_write_checks(index_write_checks(p, it), p, it);
  EXPECT_EQ(again.hashes, 5u);
  EXPECT_EQ(again.waits, 2u) << "a's hash before the replay, and its copy at the release";
  EXPECT_EQ(again.copies, 1u) << "a kernel reads a between the release and the regeneration";
  // A device that queues the copy on the stream (the host device, CUDA with pinned
  // memory): the same copy, and only the replay's wait.
  const write_check_work queued = count_write_checks(index_write_checks(p, it), p, it, true);
  EXPECT_EQ(queued.hashes, again.hashes);
  EXPECT_EQ(queued.copies, 1u);
  EXPECT_EQ(queued.copied_bytes, again.copied_bytes);
  EXPECT_EQ(queued.waits, 1u) << "a's hash before the replay";
}

// A host device of `capacity` bytes of 64 KiB pages, and its replay device.
struct host_probe_device {
  device::host_vmm vmm;
  device::host::device dev;
  host_replay_device replay{dev};
  explicit host_probe_device(std::size_t capacity) : vmm(device::host_vmm_options{64 * 1024, capacity}) {}
};

TEST(WriteCheckWork, TheProbeTimesTheHostDevicesHash) {
  host_probe_device d(std::size_t{64} << 20);
  const hash_cost c = probe_hash_cost(d.replay, d.vmm, 16, 5);
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.device, d.vmm.name() + ", hashed on its stream");
  EXPECT_GT(c.byte_s, 0.0);
  EXPECT_GE(c.issue_s, 0.0);
  EXPECT_GE(c.wait_s, 0.0);
  write_check_work w;
  w.hashes = 2;
  w.waits = 1;
  w.hashed_bytes = 1000;
  EXPECT_EQ(c.cost_s(w), 2 * c.issue_s + c.wait_s + 1000 * c.byte_s);
}

TEST(WriteCheckWork, AProbeTheDeviceRefusesSaysWhyAndCostsNothing) {
  // 64 granules on a device of 16: its memory cannot hold the probe's block.
  host_probe_device d(std::size_t{1} << 20);
  const hash_cost c = probe_hash_cost(d.replay, d.vmm, 64, 3);
  EXPECT_NE(c.error, "");
  EXPECT_EQ(c.issue_s, 0.0);
  EXPECT_EQ(c.wait_s, 0.0);
  EXPECT_EQ(c.byte_s, 0.0);
}

}  // namespace
}  // namespace sublinear::runtime
