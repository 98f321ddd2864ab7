// Offloaded packs (Note [Offload packs], Note [Offload pack search]): small buffers that
// share pages and travel in one copy each way.
#include <gtest/gtest.h>

#include <algorithm>

#include "policy/host_layout.hpp"
#include "policy/offload_packs.hpp"
#include "policy/planner.hpp"
#include "policy/simulator.hpp"
#include "policy/solvers.hpp"
#include "policy/testing/synthetic.hpp"
#include "policy_support.hpp"

namespace sublinear::policy {
namespace {

constexpr std::size_t page = std::size_t{1} << 20;

// A chain of 64 layers of an eighth of a page each, 1 ms a launch, over a link whose
// copies cost `latency_s` each and move a page in a tenth of a launch.
struct small_chain {
  iteration it = synthetic::build(synthetic::chain(64, page / 8, page));
  link_model link = test::link_at(static_cast<double>(page) / 1e-4);
  explicit small_chain(double latency_s) {
    link.to_host.latency_s = latency_s;
    link.to_device.latency_s = latency_s;
  }
};

// The candidates' buffers, in allocation order.
std::vector<buffer_id> small_buffers(const iteration& it) {
  std::vector<buffer_id> out;
  const dataflow df(it);
  const candidate_set cs(df);
  for (const candidate& c : cs.all()) out.push_back(c.buffer);
  std::sort(out.begin(), out.end(),
            [&](buffer_id a, buffer_id b) { return it.buffers[a].alloc_index < it.buffers[b].alloc_index; });
  return out;
}

// A plan offloading `members` as one pack over the gap they share.
plan packed_plan(const iteration& it, const link_model& link, const std::vector<buffer_id>& members) {
  std::vector<offload_request> requests;
  std::vector<std::uint32_t> packed;
  const dataflow df(it);
  const candidate_set cs(df);
  for (buffer_id b : members) {
    for (const candidate& c : cs.all()) {
      if (c.buffer != b) continue;
      offload_request r;
      r.target = b;
      r.evict_after = c.evict_after;
      r.restore_before = c.restore_before;
      requests.push_back(r);
      packed.push_back(7);
    }
  }
  std::vector<pack> packs;
  std::string error;
  EXPECT_TRUE(pack_requests(it, requests, packed, packs, error)) << error;
  plan p;
  place_offloads(it, link, p, requests);
  EXPECT_EQ(p.offloads.size(), 1u);
  EXPECT_EQ(packs.size(), 1u);
  for (std::size_t i = 1; i < packs.front().members.size(); ++i) {
    offload o = p.offloads.front();
    o.target = packs.front().members[i];
    p.offloads.push_back(o);
  }
  p.packs = std::move(packs);
  return p;
}

TEST(OffloadPacks, RequestsMergeIntoOnePackOverTheGapTheyShare) {
  const small_chain c(0.0);
  const std::vector<buffer_id> all = small_buffers(c.it);
  ASSERT_GE(all.size(), 8u);
  const std::vector<buffer_id> members(all.begin() + 2, all.begin() + 6);
  const plan p = packed_plan(c.it, c.link, members);
  const pack& pk = p.packs.front();
  EXPECT_TRUE(pk.offloaded);
  EXPECT_EQ(pk.members, members);
  EXPECT_EQ(pk.bytes, 4 * (page / 8));
  EXPECT_EQ(pk.offsets, (std::vector<std::size_t>{0, page / 8, page / 4, 3 * page / 8}));
  // Out after the last member's last forward use, back before the first member's next.
  const dataflow df(c.it);
  const candidate_set cs(df);
  launch_id last_use = 0, first_need = none;
  for (const candidate& cd : cs.all()) {
    if (std::find(members.begin(), members.end(), cd.buffer) == members.end()) continue;
    last_use = std::max(last_use, cd.evict_after);
    first_need = std::min(first_need, cd.restore_before);
  }
  EXPECT_EQ(p.offloads.front().evict_after, last_use);
  EXPECT_EQ(p.offloads.front().restore_before, first_need);
}

TEST(OffloadPacks, MembersThatShareNoGapAreRefusedByName) {
  const small_chain c(0.0);
  // Buffer 0 is back before launch 20; buffer 1 is last used at launch 25.
  std::vector<offload_request> requests{{0, 10, 20}, {1, 25, 30}};
  std::vector<pack> packs;
  std::string error;
  EXPECT_FALSE(pack_requests(c.it, requests, {3, 3}, packs, error));
  EXPECT_NE(error.find("share no gap"), std::string::npos) << error;
}

TEST(OffloadPacks, APackMovesAsOneCopyEachWayAndHoldsOneSlot) {
  const small_chain c(2e-3);  // 2 ms a copy: two launches
  const std::vector<buffer_id> all = small_buffers(c.it);
  const std::vector<buffer_id> members(all.begin(), all.begin() + 8);
  const plan p = packed_plan(c.it, c.link, members);
  const link_copies moved = copies_of(c.it, p);
  ASSERT_EQ(moved.carrier.size(), 8u);
  for (std::size_t j = 0; j < 8; ++j) {
    EXPECT_EQ(moved.carrier[j], 0u);
    EXPECT_EQ(moved.offset[j], j * (page / 8));
    EXPECT_EQ(moved.bytes[j], j == 0 ? page : 0u);
  }
  const simulation s = simulator(c.it, c.link).run(p);
  ASSERT_TRUE(s.valid) << s.error;
  EXPECT_EQ(s.offloaded_buffers, 8u);
  EXPECT_EQ(s.offloaded_bytes, page);
  EXPECT_DOUBLE_EQ(s.link_busy_s, c.link.to_host.copy_s(page) + c.link.to_device.copy_s(page));
  // Every member rides on the first one's copies.
  for (std::size_t j = 1; j < 8; ++j) {
    EXPECT_EQ(s.copies[j].to_host_done, s.copies[0].to_host_done);
    EXPECT_EQ(s.copies[j].to_device_done, s.copies[0].to_device_done);
  }
  const host_layout pool = lay_out_host_pool(c.it, p);
  EXPECT_EQ(pool.pool_bytes, page);
  for (std::size_t j = 0; j < 8; ++j) EXPECT_EQ(pool.offsets[j], pool.offsets[0] + j * (page / 8));
  // Out over the shared gap, the pack's page is released: the peak falls by it.
  EXPECT_LT(s.peak, simulate(c.it, plan{}).peak);
}

TEST(OffloadPacks, TheSimulatorRefusesAPackWhoseMembersMoveApart) {
  const small_chain c(0.0);
  const std::vector<buffer_id> all = small_buffers(c.it);
  plan p = packed_plan(c.it, c.link, {all[0], all[1], all[2]});
  p.offloads[1].restore_before = p.offloads[0].restore_before - 1;
  p.offloads[1].fetch_after = std::min(p.offloads[1].fetch_after, p.offloads[1].restore_before - 1);
  p.offloads[1].release_before = std::min(p.offloads[1].release_before, p.offloads[1].fetch_after + 1);
  const simulation s = simulator(c.it, c.link).run(p);
  EXPECT_FALSE(s.valid);
  EXPECT_NE(s.error.find("moves as one"), std::string::npos) << s.error;

  plan q = packed_plan(c.it, c.link, {all[0], all[1]});
  q.offloads.pop_back();  // a member with no offload of its own
  const simulation t = simulator(c.it, c.link).run(q);
  EXPECT_FALSE(t.valid);
  EXPECT_NE(t.error.find("not a buffer some offload targets"), std::string::npos) << t.error;
}

// Copies that cost three launches each: one per buffer never pays, one per pack of
// eight does. With offload packs asked for, the planners' plans carry packs and add less
// time than without; without, no pack is offloaded.
TEST(OffloadPacks, ThePlannersPackWhereOneCopyPerBufferCannotPay) {
  const small_chain c(3e-3);
  const std::size_t budget = simulate(c.it, plan{}).peak * 6 / 10;
  for (const char* name : {"greedy", "reforward"}) {
    SCOPED_TRACE(name);
    planner::options o;
    o.offload = offload_mode::on;
    o.link = c.link;
    o.threads = 1;
    const plan without = make_planner(name)->make_plan(c.it, budget, o);
    for (const pack& pk : without.packs) EXPECT_FALSE(pk.offloaded);
    o.offload_packs = true;
    const plan with = make_planner(name)->make_plan(c.it, budget, o);
    EXPECT_LE(with.predicted_peak, budget);
    const auto offloaded = std::count_if(with.packs.begin(), with.packs.end(), [](const pack& pk) { return pk.offloaded; });
    EXPECT_GT(offloaded, 0);
    EXPECT_LT(with.added_compute_s + with.predicted_stall_s, without.added_compute_s + without.predicted_stall_s);
    const simulation again = simulator(c.it, c.link).run(with);
    EXPECT_TRUE(again.valid) << again.error;
  }
}

}  // namespace
}  // namespace sublinear::policy
