// Graph and liveness inference: a scripted iteration checked field by field, then the
// structure of real workloads (ResNet, unrolled LSTM) against what the models say.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "workloads/models/lstm.hpp"
#include "workloads/models/resnet.hpp"
#include "workloads/training.hpp"
#include "sublinear/error.hpp"
#include "tracer/analysis.hpp"
#include "tracer/block_hashes.hpp"
#include "tracer/trace_file.hpp"
#include "tracer_fixture.hpp"

namespace sublinear::tracer {
namespace {

using policy::buffer_id;
using policy::launch_id;
using policy::none;
using testing::traced_session;

host_collector_options observed_and_timed() {
  host_collector_options c;
  c.observe_writes = true;
  c.time_launches = true;
  return c;
}

// Forward a -> b -> c from a persistent w, then a "backward" that reads c, b and a into g:
//   L0 scale(w->a)  L1 scale(a->b)  L2 scale(b->c)  L3 scale(c->g)  [free c]
//   L4 scale(b->g)  [free b]  L5 scale(a->g)  [free a, free g]
class ScriptedIteration : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = s_.ctx();
    w_ = static_cast<float*>(ctx.bytes(256));
    s_.dev().memset_async(w_, 0, 256, nullptr);
    for (int i = 0; i < 64; ++i) host_ones_[i] = 1.0f;
    s_.dev().memcpy_async(w_, host_ones_, 256, nullptr);
    s_.rec().mark_iteration();
    auto* a = static_cast<float*>(ctx.bytes(1024));
    scale(w_, a, 64);
    auto* b = static_cast<float*>(ctx.bytes(2048));
    scale(a, b, 256);
    auto* c = static_cast<float*>(ctx.bytes(4096));
    scale(b, c, 512);
    auto* g = static_cast<float*>(ctx.bytes(512));
    scale(c, g, 128);
    ctx.release_bytes(c, 4096);
    scale(b, g, 128);
    ctx.release_bytes(b, 2048);
    scale(a, g, 128);
    ctx.release_bytes(a, 1024);
    ctx.release_bytes(g, 512);
    s_.rec().mark_iteration();
    trace_ = s_.take();
    it_ = analyse(trace_, trace_.marked_iterations().at(0));
  }
  void TearDown() override { s_.ctx().release_bytes(w_, 256); }

  void scale(const float* in, float* out, std::int64_t n) {
    testing::launch(s_.dev(), testing::scale_kernel(), testing::scale_params{in, out, n});
  }

  traced_session s_{observed_and_timed()};
  float* w_ = nullptr;
  float host_ones_[64] = {};
  trace trace_;
  analysed_iteration it_;
  // Buffer ids: the persistent w first, then allocations in order.
  static constexpr buffer_id W = 0, A = 1, B = 2, C = 3, G = 4;
};

TEST_F(ScriptedIteration, BuffersHaveTheirSizesAllocationIndicesAndLiveIntervals) {
  const auto& bufs = it_.graph.buffers;
  ASSERT_EQ(bufs.size(), 5u);
  EXPECT_EQ(it_.buffer_addresses[W], testing::addr(w_));
  EXPECT_TRUE(bufs[W].persistent());
  EXPECT_EQ(bufs[W].alloc_index, none);
  EXPECT_EQ(bufs[W].free_at, none);
  const std::vector<std::size_t> sizes = {1024, 2048, 4096, 512};
  const std::vector<launch_id> alloc_at = {0, 1, 2, 3};
  const std::vector<launch_id> free_at = {6, 5, 4, 6};
  for (buffer_id b = A; b <= G; ++b) {
    EXPECT_EQ(bufs[b].size, sizes[b - 1]) << b;
    EXPECT_EQ(bufs[b].alloc_index, b - 1) << b;
    EXPECT_EQ(bufs[b].alloc_at, alloc_at[b - 1]) << b;
    EXPECT_EQ(bufs[b].free_at, free_at[b - 1]) << b;
    EXPECT_FALSE(bufs[b].persistent()) << b;
  }
}

TEST_F(ScriptedIteration, LaunchesTouchWhatTheirParametersPointToAndWriteTheirOutputs) {
  const auto& ls = it_.graph.launches;
  ASSERT_EQ(ls.size(), 6u);
  const std::vector<std::vector<buffer_id>> touched = {{W, A}, {A, B}, {B, C}, {C, G}, {B, G}, {A, G}};
  const std::vector<buffer_id> written = {A, B, C, G, G, G};
  for (launch_id l = 0; l < 6; ++l) {
    EXPECT_EQ(ls[l].touched, touched[l]) << l;
    EXPECT_EQ(ls[l].written, std::vector<buffer_id>{written[l]}) << l;
    EXPECT_TRUE(ls[l].replayable);
    EXPECT_EQ(ls[l].kind, policy::launch_kind::kernel);
    EXPECT_EQ(it_.graph.kernel_names[ls[l].kernel], "tracer_test.scale");
    EXPECT_EQ(ls[l].stream, 0u);
  }
  EXPECT_EQ(it_.observed_launches, 6u);
  EXPECT_EQ(it_.graph.buffers[A].users, (std::vector<launch_id>{0, 1, 5}));
  EXPECT_EQ(it_.graph.buffers[B].users, (std::vector<launch_id>{1, 2, 4}));
  EXPECT_EQ(it_.graph.buffers[G].users, (std::vector<launch_id>{3, 4, 5}));
}

TEST_F(ScriptedIteration, ProducersAreFirstWritersAndInputsExcludeFreshOutputs) {
  EXPECT_EQ(it_.producer[W], none);  // written before the iteration, by a copy
  EXPECT_EQ(it_.producer[A], 0u);
  EXPECT_EQ(it_.producer[B], 1u);
  EXPECT_EQ(it_.producer[C], 2u);
  EXPECT_EQ(it_.producer[G], 3u);
  EXPECT_EQ(it_.inputs[0], std::vector<buffer_id>{W});
  EXPECT_EQ(it_.inputs[1], std::vector<buffer_id>{A});
  // g is written again by L4 on top of what L3 wrote: an accumulation may read it.
  EXPECT_EQ(it_.inputs[4], (std::vector<buffer_id>{B, G}));
}

TEST_F(ScriptedIteration, TheTurningPointIsWhereTheHeldActivationsPeak) {
  // Held across p: a over (0, 5), b over (1, 4), g over (3, 5): 1024, 3072, 3072, 1536.
  EXPECT_EQ(it_.graph.turning_point, 2u);
  EXPECT_EQ(it_.held_bytes_at_turning_point, 3072u);
  // The plain live-byte peak comes later, when g joins c: 256 + 1024 + 2048 + 4096 + 512.
  EXPECT_EQ(it_.graph.peak_bytes, 7936u);
  EXPECT_EQ(it_.live_peak_at, 3u);
  EXPECT_EQ(it_.live_bytes.size(), 7u);
  EXPECT_EQ(it_.live_bytes[0], 256u + 1024u);
}

TEST_F(ScriptedIteration, CandidatesAreLiveAcrossTheTurningPointWithAnIdleGap) {
  // c is used at L2 and L3 (no gap); g is allocated after the turning point.
  EXPECT_EQ(it_.graph.candidates, (std::vector<buffer_id>{A, B}));
  analysis_options strict;
  strict.min_idle_gap = 2;  // b's gap (L3) is one launch long
  EXPECT_EQ(analyse(trace_, trace_.marked_iterations().at(0), strict).graph.candidates, std::vector<buffer_id>{A});
}

TEST_F(ScriptedIteration, CostsAreMeasuredDurations) {
  EXPECT_EQ(it_.timed_launches, 6u);
  for (const policy::launch& l : it_.graph.launches) EXPECT_GT(l.cost_s, 0.0);
  EXPECT_EQ(it_.graph.granularity, 64u << 10);
}

TEST_F(ScriptedIteration, MapsLaunchesAndBuffersBackToTheTrace) {
  for (launch_id l = 0; l < it_.launch_events.size(); ++l) {
    const event& e = trace_.events[it_.launch_events[l]];
    EXPECT_EQ(e.kind, event_kind::launch);
    EXPECT_EQ(it_.touches[l].size(), 2u);
    for (const touch& t : it_.touches[l]) {
      std::uint64_t word;
      std::memcpy(&word, trace_.params(e).data() + t.param_offset, 8);
      EXPECT_EQ(word, it_.buffer_addresses[t.buffer] + t.offset);
    }
  }
}

// Note [Unknown producers]: h is written through a pointer the scan cannot see, then read
// by the next layer and by the backward. Its first user only reads it, so nothing known
// produces it: it is never evicted, though it is live across the turning point exactly
// as a, which is a candidate.
TEST(Analysis, ABufferReadBeforeAnyObservedWriteHasAnUnknownProducerAndIsNeverEvicted) {
  traced_session s{observed_and_timed()};
  auto ctx = s.ctx();
  auto* w = static_cast<float*>(ctx.bytes(4096));
  s.dev().memset_async(w, 0, 4096, nullptr);
  s.rec().mark_iteration();
  auto scale = [&](const float* in, float* out) {
    testing::launch(s.dev(), testing::scale_kernel(), testing::scale_params{in, out, 1024});
  };
  auto* a = static_cast<float*>(ctx.bytes(4096));
  scale(w, a);
  auto* h = static_cast<float*>(ctx.bytes(4096));
  testing::launch(s.dev(), testing::hidden_output_kernel(),
                  testing::hidden_output_params{a, testing::addr(h) ^ testing::kHiddenPointerKey, 1024});
  auto* y = static_cast<float*>(ctx.bytes(4096));
  scale(h, y);
  auto* g = static_cast<float*>(ctx.bytes(4096));
  scale(y, g);
  ctx.release_bytes(y, 4096);
  scale(h, g);
  ctx.release_bytes(h, 4096);
  scale(a, g);
  ctx.release_bytes(a, 4096);
  ctx.release_bytes(g, 4096);
  s.rec().mark_iteration();
  const trace t = s.take();
  const analysed_iteration it = analyse(t, t.marked_iterations().at(0));
  ctx.release_bytes(w, 4096);
  constexpr buffer_id A = 1, H = 2;
  ASSERT_EQ(it.graph.buffers.size(), 5u);
  EXPECT_EQ(it.unproduced, std::vector<buffer_id>{H});
  EXPECT_TRUE(it.graph.buffers[H].never_evict);
  EXPECT_FALSE(it.graph.buffers[A].never_evict);
  EXPECT_EQ(it.producer[H], none);
  const auto& c = it.graph.candidates;
  EXPECT_NE(std::find(c.begin(), c.end(), A), c.end());
  EXPECT_EQ(std::find(c.begin(), c.end(), H), c.end());
  // The hidden launch touches only its input; h's first user is the scale that reads it.
  EXPECT_EQ(it.graph.launches[1].touched, std::vector<buffer_id>{A});
  EXPECT_EQ(it.graph.buffers[H].users.front(), 2u);
}

// Note [Filled fresh blocks]: two blocks allocated in the iteration and first read by a
// kernel that leaves them as they are. One still holds the fill the engine gives fresh
// blocks: no one wrote it, and it needs no producer. The other was written by something
// the tracer did not see (here a set no hook sees): its producer is unknown.
TEST(Analysis, ABlockItsFirstUserFindsStillFilledNeedsNoProducer) {
  traced_session s{observed_and_timed()};
  auto ctx = s.ctx();
  s.rec().mark_iteration();
  auto scale = [&](const float* in, float* out) {
    testing::launch(s.dev(), testing::scale_kernel(), testing::scale_params{in, out, 1024});
  };
  auto* filled = static_cast<float*>(ctx.bytes(4096));
  s.dev().memset_async_unobserved(filled, fresh_fill_byte, 4096, nullptr);
  auto* unseen = static_cast<float*>(ctx.bytes(4096));
  s.dev().memset_async_unobserved(unseen, 0, 4096, nullptr);
  auto* a = static_cast<float*>(ctx.bytes(4096));
  scale(filled, a);
  auto* b = static_cast<float*>(ctx.bytes(4096));
  scale(unseen, b);
  ctx.release_bytes(filled, 4096);
  ctx.release_bytes(unseen, 4096);
  scale(a, b);
  ctx.release_bytes(a, 4096);
  ctx.release_bytes(b, 4096);
  s.rec().mark_iteration();
  const trace t = s.take();
  const analysed_iteration it = analyse(t, t.marked_iterations().at(0));
  constexpr buffer_id Filled = 0, Unseen = 1;
  ASSERT_EQ(it.graph.buffers.size(), 4u);
  ASSERT_EQ(t.fresh.size(), 1u);
  EXPECT_EQ(t.fresh[0].address, testing::addr(filled));
  EXPECT_EQ(t.fresh[0].seq, t.events[it.launch_events[0]].seq);
  EXPECT_TRUE(it.graph.launches[0].written == std::vector<buffer_id>{2}) << "a fresh record is not a write";
  EXPECT_TRUE(it.graph.buffers[Filled].unwritten_at_first_use);
  EXPECT_FALSE(it.graph.buffers[Filled].never_evict);
  EXPECT_FALSE(it.graph.buffers[Unseen].unwritten_at_first_use);
  EXPECT_EQ(it.unproduced, std::vector<buffer_id>{Unseen});
}

TEST(Analysis, EachBufferKeepsTheStreamThatAllocatedIt) {
  // Packs hold buffers of one stream (Note [Packs] in policy/packs.hpp), so the iteration
  // says which stream allocated each buffer, in the launches' dense numbering.
  traced_session s{observed_and_timed()};
  auto ctx = s.ctx();
  device::host::stream* side = s.dev().create_stream();
  s.rec().mark_iteration();
  auto* a = static_cast<float*>(ctx.bytes(4096));
  void* b = s.alloc().allocate(4096, side);
  testing::launch(s.dev(), testing::scale_kernel(), testing::scale_params{a, a, 1024});
  s.dev().synchronize();  // the side stream's launch reads what the default stream's wrote
  testing::launch(s.dev(), testing::scale_kernel(), testing::scale_params{a, static_cast<float*>(b), 1024}, side);
  s.dev().synchronize();
  s.alloc().deallocate(b);
  ctx.release_bytes(a, 4096);
  s.rec().mark_iteration();
  const trace t = s.take();
  const analysed_iteration it = analyse(t, t.marked_iterations().at(0));
  ASSERT_EQ(it.graph.buffers.size(), 2u);
  ASSERT_EQ(it.graph.launches.size(), 2u);
  EXPECT_EQ(it.graph.buffers[0].stream, it.graph.launches[0].stream);
  EXPECT_EQ(it.graph.buffers[1].stream, it.graph.launches[1].stream);
  EXPECT_NE(it.graph.buffers[0].stream, it.graph.buffers[1].stream);
}

TEST(Analysis, CopiesAndSetsAreLaunchesAndHostCopiesAreNotReplayable) {
  traced_session s;
  auto ctx = s.ctx();
  float host_buf[16] = {};
  auto* a = static_cast<float*>(ctx.bytes(64));
  auto* b = static_cast<float*>(ctx.bytes(64));
  s.rec().mark_iteration();
  s.dev().memcpy_async(a, host_buf, 64, nullptr);
  s.dev().memset_async(b, 0, 64, nullptr);
  s.dev().memcpy_async(b, a, 64, nullptr);
  s.dev().memcpy_async(host_buf, b, 64, nullptr);
  s.rec().mark_iteration();
  const trace t = s.take();
  const analysed_iteration it = analyse(t, t.marked_iterations().at(0));
  const auto& ls = it.graph.launches;
  ASSERT_EQ(ls.size(), 4u);
  EXPECT_EQ(ls[0].kind, policy::launch_kind::memcpy);
  EXPECT_FALSE(ls[0].replayable);
  EXPECT_EQ(ls[1].kind, policy::launch_kind::memset);
  EXPECT_TRUE(ls[1].replayable);
  EXPECT_EQ(ls[2].kind, policy::launch_kind::memcpy);
  EXPECT_TRUE(ls[2].replayable);
  EXPECT_FALSE(ls[3].replayable);
  EXPECT_EQ(ls[2].touched, (std::vector<buffer_id>{0, 1}));
  EXPECT_EQ(ls[2].written, std::vector<buffer_id>{1});
  EXPECT_EQ(it.graph.kernel_names[ls[0].kernel], "memcpy");
  EXPECT_EQ(it.graph.kernel_names[ls[1].kernel], "memset");
  // A buffer reached by a non-replayable copy is never evicted.
  EXPECT_TRUE(it.graph.buffers[0].never_evict);
  EXPECT_TRUE(it.graph.buffers[1].never_evict);
  ctx.release_bytes(a, 64);
  ctx.release_bytes(b, 64);
}

TEST(Analysis, RejectsARangeOutsideTheTraceAndSaysWhyNoIterationWasFound) {
  trace t;
  t.streams = {0};
  EXPECT_THROW(static_cast<void>(analyse(t, {0, 1})), trace_format_error);
  try {
    static_cast<void>(analyse_last_iteration(t));
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("no iteration markers"), std::string::npos) << e.what();
  }
}

// ---- real workloads -------------------------------------------------------------------------------

struct workload_graph {
  analysed_iteration it;
  std::map<std::string, int> candidate_producers;  // kernel name (or "none") -> candidates
  launch_id last_forward = 0;                      // last launch of `forward_kernel`
  launch_id first_backward = none;                 // first launch of `backward_kernel`
};

workload_graph trace_workload(workloads::models::model& m, const std::string& forward_kernel,
                              const std::string& backward_prefix, bool observe_writes) {
  host_collector_options c = observed_and_timed();
  c.observe_writes = observe_writes;
  traced_session s(c);
  auto ctx = s.ctx();
  workloads::training_options o;
  o.iterations = 3;
  o.on_iteration_end = [&](const workloads::iteration_figures&) { s.rec().mark_iteration(); };
  static_cast<void>(workloads::train(ctx, m, o));
  m.release();
  const trace t = s.take();
  workload_graph w{analyse_last_iteration(t), {}, 0, none};
  const policy::iteration& g = w.it.graph;
  for (buffer_id b : g.candidates) {
    const launch_id p = w.it.producer[b];
    ++w.candidate_producers[p == none ? "none" : g.kernel_names[g.launches[p].kernel]];
  }
  for (launch_id l = 0; l < g.launches.size(); ++l) {
    const std::string& name = g.kernel_names[g.launches[l].kernel];
    if (name == forward_kernel) w.last_forward = l;
    if (w.first_backward == none && name.rfind(backward_prefix, 0) == 0) w.first_backward = l;
  }
  return w;
}

// What ResNet saves for backward (resnet.cpp), with B blocks of which P have a projection
// shortcut (the first block of stages two and three): each of the 1 + 2B + P conv-BN
// layers keeps its convolution output (written by the GEMM) and BatchNorm's mean and
// inverse deviation; the stem's and every block's first BatchNorm output (ReLU'd in
// place) and every block's output (the residual add, ReLU'd in place) are kept; the pooled
// features feed the classifier's backward. The batch input, read again by the stem's weight
// gradient, is not a candidate: a host-to-device copy wrote it, which cannot be replayed.
void expect_resnet_structure(std::int64_t depth) {
  workloads::models::resnet_config c;
  c.depth = depth;
  c.image = 8;
  c.batch = 2;
  workloads::models::resnet m(c);
  const int B = static_cast<int>(m.blocks());
  const int P = 2;
  const int conv_bn = 1 + 2 * B + P;
  const workload_graph w = trace_workload(m, "global_avgpool_fwd_f32", "softmax_xent_bwd", true);
  const policy::iteration& g = w.it.graph;
  SCOPED_TRACE("resnet-" + std::to_string(depth));
  EXPECT_EQ(g.candidates.size(), static_cast<std::size_t>(8 * B + 3 * P + 5));
  EXPECT_EQ(w.candidate_producers, (std::map<std::string, int>{{"conv2d_fwd_f32", conv_bn},
                                                               {"batchnorm_fwd_train_f32", 2 * conv_bn + 1 + B},
                                                               {"add_f32", B},
                                                               {"global_avgpool_fwd_f32", 1}}));
  // The input: written by the upload, so never evicted.
  const auto upload = std::find_if(g.launches.begin(), g.launches.end(),
                                   [](const policy::launch& l) { return l.kind == policy::launch_kind::memcpy; });
  ASSERT_NE(upload, g.launches.end());
  EXPECT_FALSE(upload->replayable);
  ASSERT_EQ(upload->written.size(), 1u);
  EXPECT_TRUE(g.buffers[upload->written[0]].never_evict);
  // The turning point is the end of the forward pass: after pooling, before the loss's backward.
  EXPECT_GT(g.turning_point, w.last_forward);
  EXPECT_LT(g.turning_point, w.first_backward);
  for (buffer_id b : g.candidates) {
    const auto& users = g.buffers[b].users;
    EXPECT_LE(users.front(), g.turning_point);
    EXPECT_GT(users.back(), g.turning_point);
    if (w.it.producer[b] != none) {
      EXPECT_LT(w.it.producer[b], g.turning_point);
    }
  }
  EXPECT_TRUE(std::all_of(g.launches.begin(), g.launches.end(), [](const policy::launch& l) {
    return l.replayable || l.kind == policy::launch_kind::memcpy;
  }));
}

TEST(WorkloadGraph, ResNetActivationsProducersAndTurningPointMatchTheModel) {
  expect_resnet_structure(8);
  expect_resnet_structure(14);
}

// What the unrolled LSTM keeps per step (models/lstm.hpp): the input slice
// (sequence_select), h, c and the activated gates (one lstm_cell_fwd launch writes all
// three) and the step's logits (the head's GEMM); plus the zero initial h0 and c0 (fill).
// The last step's logits are the exception: the loss reads them on both sides of the
// turning point with nothing in between, so there is no gap to evict them in.
// Writes are not observed here: filling zeros into a block that already holds zeros
// (fresh pages) changes no byte, so an observed run may show h0 and c0 with no producer
// (Note [Write observation], Limitations); the first toucher is the producer when every
// touched buffer counts as written.
TEST(WorkloadGraph, UnrolledLstmKeepsFiveActivationsPerStep) {
  for (std::int64_t steps : {4, 9}) {
    workloads::models::lstm_config c;
    c.seq_len = steps;
    c.batch = 2;
    c.input = 4;
    c.hidden = 8;
    workloads::models::lstm m(c);
    const workload_graph w = trace_workload(m, "lstm_cell_fwd_f32", "lstm_cell_bwd", false);
    const policy::iteration& g = w.it.graph;
    const int T = static_cast<int>(steps);
    SCOPED_TRACE("lstm T=" + std::to_string(T));
    EXPECT_EQ(g.candidates.size(), static_cast<std::size_t>(5 * T + 1));
    EXPECT_EQ(w.candidate_producers, (std::map<std::string, int>{{"lstm_cell_fwd_f32", 3 * T},
                                                                 {"sequence_select_fwd_f32", T},
                                                                 {"gemm_nt_f32", T - 1},
                                                                 {"fill_f32", 2}}));
    EXPECT_GT(g.turning_point, w.last_forward);
    EXPECT_LT(g.turning_point, w.first_backward);
  }
}

}  // namespace
}  // namespace sublinear::tracer
