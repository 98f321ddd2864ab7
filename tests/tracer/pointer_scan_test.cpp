// Pointer discovery: the live-block map, the parameter scan (interior pointers, pointers
// inside by-value structs) and the never-replay list.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "workloads/kernels/elementwise.hpp"
#include "workloads/kernels/optimizer.hpp"
#include "sublinear/error.hpp"
#include "tracer/analysis.hpp"
#include "tracer/pointer_scan.hpp"
#include "tracer_fixture.hpp"

namespace sublinear::tracer {
namespace {

using testing::addr;
using testing::traced_session;

constexpr std::uint64_t MiB = 1 << 20;

template <class T>
std::span<const std::byte> bytes_of(const T& v) {
  return {reinterpret_cast<const std::byte*>(&v), sizeof v};
}

TEST(BlockMap, FindsTheBlockContainingAnInteriorAddress) {
  block_map m;
  m.insert(0x10000, 4096, 7);
  const block_map::entry* e = m.find(0x10000 + 1234);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->id, 7u);
  EXPECT_EQ(e->base, 0x10000u);
  EXPECT_EQ(m.find(0x10000)->id, 7u);
  EXPECT_EQ(m.find(0x10000 + 4095)->id, 7u);
}

TEST(BlockMap, DoesNotCountOnePastTheEndOrAddressesBetweenBlocks) {
  block_map m;
  m.insert(0x10000, 4096, 1);
  m.insert(0x20000, 4096, 2);
  EXPECT_EQ(m.find(0x10000 + 4096), nullptr);
  EXPECT_EQ(m.find(0x18000), nullptr);
  EXPECT_EQ(m.find(0xFFFF), nullptr);
  EXPECT_EQ(m.find(0x20000 + 4096), nullptr);
  EXPECT_EQ(m.find(0), nullptr);
}

TEST(BlockMap, FindsABlockSpanningManyPagesFromAnyOfThem) {
  block_map m;
  const std::uint64_t base = 0x7f0000100000;  // not page-aligned for the map's 2 MiB pages
  m.insert(base, 9 * MiB + 17, 3);
  for (std::uint64_t off : {std::uint64_t{0}, 1 * MiB, 2 * MiB + 5, 8 * MiB, 9 * MiB + 16}) {
    const block_map::entry* e = m.find(base + off);
    ASSERT_NE(e, nullptr) << "offset " << off;
    EXPECT_EQ(e->id, 3u);
  }
  EXPECT_EQ(m.find(base + 9 * MiB + 17), nullptr);
  EXPECT_EQ(m.entries().size(), 1u);
}

TEST(BlockMap, EraseRemovesEveryPageOfABlock) {
  block_map m;
  m.insert(0x40000000, 5 * MiB, 1);
  m.insert(0x40000000 + 5 * MiB, 512, 2);
  EXPECT_TRUE(m.erase(0x40000000));
  EXPECT_FALSE(m.erase(0x40000000));
  EXPECT_EQ(m.find(0x40000000 + 3 * MiB), nullptr);
  EXPECT_EQ(m.find(0x40000000 + 5 * MiB)->id, 2u);
  EXPECT_EQ(m.size(), 1u);
}

TEST(BlockMap, ManySmallBlocksInOnePageAreEachFound) {
  block_map m;
  for (std::uint32_t i = 0; i < 1000; ++i) m.insert(0x100000 + i * 512, 512, i);
  for (std::uint32_t i = 0; i < 1000; ++i) {
    const block_map::entry* e = m.find(0x100000 + i * 512 + 511);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->id, i);
  }
  for (std::uint32_t i = 0; i < 1000; i += 2) EXPECT_TRUE(m.erase(0x100000 + i * 512));
  EXPECT_EQ(m.find(0x100000), nullptr);
  EXPECT_EQ(m.find(0x100000 + 512)->id, 1u);
  EXPECT_EQ(m.size(), 500u);
}

TEST(BlockMap, ReinsertingAtTheSameBaseReplacesTheBlock) {
  block_map m;
  m.insert(0x1000, 100, 1);
  m.insert(0x1000, 50, 2);
  EXPECT_EQ(m.size(), 1u);
  EXPECT_EQ(m.find(0x1000 + 60), nullptr);
  EXPECT_EQ(m.find(0x1000 + 10)->id, 2u);
}

// A trace may give a block any size up to 2^48 bytes (tracer::max_event_bytes): a map that
// registered a 1 TiB block in each of its 524,288 pages took a minute and gigabytes for
// a small trace of such blocks. Blocks over a few pages cost the same as small ones.
TEST(BlockMap, AHugeBlockCostsNoMoreEntriesThanASmallOneAndIsFoundAnywhere) {
  block_map m;
  constexpr std::uint64_t TiB = std::uint64_t{1} << 40;
  const std::uint64_t base = 0x7f0000100000;
  m.insert(base, TiB, 1);
  m.insert(base + TiB, 4096, 2);       // right behind it
  m.insert(base - 3 * MiB, 3 * MiB, 3);  // right before it, over two pages
  // ASSERT: a map that registers every page must not get to the larger block below.
  ASSERT_LE(m.page_entries(), 4u) << "a block over many pages must not be registered in each";
  for (std::uint64_t off : {std::uint64_t{0}, std::uint64_t{1}, 5 * MiB, TiB / 2, TiB - 1}) {
    const block_map::entry* e = m.find(base + off);
    ASSERT_NE(e, nullptr) << "offset " << off;
    EXPECT_EQ(e->id, 1u);
  }
  EXPECT_EQ(m.find(base + TiB)->id, 2u);
  EXPECT_EQ(m.find(base - 1)->id, 3u);
  EXPECT_EQ(m.at(base)->id, 1u);
  EXPECT_EQ(m.at(base + 1), nullptr);
  EXPECT_EQ(m.entries().size(), 3u);
  m.insert(base, 2 * MiB, 4);  // replaced by a small block at the same base
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m.find(base + 5 * MiB), nullptr);
  EXPECT_EQ(m.find(base + 1)->id, 4u);
  EXPECT_TRUE(m.erase(base));
  EXPECT_FALSE(m.erase(base));
  // The largest block a 64-bit address allows: it ends at the end of the address space.
  m.insert(std::uint64_t{1} << 47, ~std::uint64_t{0}, 5);
  EXPECT_EQ(m.find(~std::uint64_t{0} - 1)->id, 5u);
  EXPECT_EQ(m.find(base + TiB)->id, 2u);
  EXPECT_TRUE(m.erase(std::uint64_t{1} << 47));
  EXPECT_EQ(m.find(~std::uint64_t{0} - 1), nullptr);
  EXPECT_EQ(m.size(), 2u);
}

TEST(ScanParams, ReportsEveryAlignedWordInsideABlockWithItsOffset) {
  block_map m;
  m.insert(0x200000, 4096, 1);
  m.insert(0x300000, 4096, 2);
  struct {
    std::uint64_t scalar = 42;
    std::uint64_t p1 = 0x200000 + 100;  // interior
    std::uint64_t zero = 0;
    std::uint64_t p2 = 0x300000;
    std::uint64_t outside = 0x300000 + 4096;
  } params;
  std::vector<scan_hit> hits;
  scan_params(bytes_of(params), m, hits);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0], (scan_hit{8, 1, 0x200000, 100}));
  EXPECT_EQ(hits[1], (scan_hit{24, 2, 0x300000, 0}));
}

// A packed struct puts a pointer at any offset (Note [Pointer scan]); an aligned pointer's
// bytes seen from another offset are not a second one, and bytes past the last whole 8 are
// not a pointer.
TEST(ScanParams, FindsAPointerAtAnUnalignedOffsetButNotAnAlignedPointersShiftedBytes) {
  block_map m;
  m.insert(0x200000, 4096, 1);
  m.insert(0x20000000, 4096, 2);
  std::byte block[30] = {};
  const std::uint64_t p = 0x200010;
  std::memcpy(block + 4, &p, 8);    // straddles two aligned words, as in a packed struct
  const std::uint64_t q = 0x20000000;
  std::memcpy(block + 16, &q, 8);   // aligned: q >> 8 at offset 17 would be block 1's... not counted
  std::memcpy(block + 25, &p, 5);   // only 5 of its bytes before the end
  std::vector<scan_hit> hits;
  scan_params(block, m, hits);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0], (scan_hit{4, 1, 0x200000, 0x10}));
  EXPECT_EQ(hits[1], (scan_hit{16, 2, 0x20000000, 0}));
}

// ---- on the host device: a test that fails if the scan is removed ------------------------------

TEST(PointerScanOnHostDevice, FindsPointersInsideAByValueStructAndInteriorPointers) {
  traced_session s;
  auto ctx = s.ctx();
  const std::size_t n = 256;
  auto* a = static_cast<float*>(ctx.bytes(n * sizeof(float)));
  auto* b = static_cast<float*>(ctx.bytes(n * sizeof(float)));
  std::vector<float*> outs;
  for (int i = 0; i < 4; ++i) outs.push_back(static_cast<float*>(ctx.bytes(n * sizeof(float))));
  auto* untouched = static_cast<float*>(ctx.bytes(n * sizeof(float)));
  s.dev().memset_async(a, 0, n * sizeof(float), nullptr);
  s.dev().memset_async(b, 0, n * sizeof(float), nullptr);

  testing::nested_params p;
  std::memset(&p, 0, sizeof p);
  p.pair.a = a + 17;        // interior pointer into a
  p.pair.b = b;
  p.count = 4;
  for (int i = 0; i < 4; ++i) p.list[i] = outs[static_cast<std::size_t>(i)] + (i == 3 ? 100 : 0);
  p.cookie = 12345;
  s.rec().mark_iteration();
  testing::launch(s.dev(), testing::nested_kernel(), p);
  s.rec().mark_iteration();
  const trace t = s.take();

  const analysed_iteration it = analyse(t, t.marked_iterations().at(0));
  ASSERT_EQ(it.graph.launches.size(), 1u);
  std::vector<std::uint64_t> touched;
  for (policy::buffer_id id : it.graph.launches[0].touched) touched.push_back(it.buffer_addresses[id]);
  std::vector<std::uint64_t> expected = {addr(a), addr(b)};
  for (float* o : outs) expected.push_back(addr(o));
  std::sort(touched.begin(), touched.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(touched, expected);
  EXPECT_EQ(std::count(touched.begin(), touched.end(), addr(untouched)), 0);

  // The offsets say where the words were and how far inside their blocks they point.
  const std::vector<touch>& words = it.touches[0];
  ASSERT_EQ(words.size(), 6u);
  EXPECT_EQ(words[0].param_offset, offsetof(testing::nested_params, pair));
  EXPECT_EQ(words[0].offset, 17 * sizeof(float));
  EXPECT_EQ(words[5].param_offset, offsetof(testing::nested_params, list) + 3 * sizeof(float*));
  EXPECT_EQ(words[5].offset, 100 * sizeof(float));

  for (void* q : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(untouched)}) {
    ctx.release_bytes(q, n * sizeof(float));
  }
  for (float* o : outs) ctx.release_bytes(o, n * sizeof(float));
}

TEST(PointerScanOnHostDevice, FindsEveryTensorOfAMultiTensorOptimizerStep) {
  traced_session s;
  auto ctx = s.ctx();
  std::vector<workloads::tensor> params, grads, bufs;
  for (int i = 0; i < 5; ++i) {
    params.push_back(ctx.empty({8, 3}));
    grads.push_back(ctx.empty({8, 3}));
    bufs.push_back(ctx.empty({8, 3}));
    for (auto* t : {&params.back(), &grads.back(), &bufs.back()}) workloads::ops::zero(ctx, *t);
  }
  s.rec().mark_iteration();
  workloads::ops::sgd_step(ctx, params, grads, bufs, {});
  s.rec().mark_iteration();
  const trace t = s.take();
  const analysed_iteration it = analyse(t, t.marked_iterations().at(0));
  ASSERT_EQ(it.graph.launches.size(), 1u);
  EXPECT_EQ(it.graph.kernel_names[it.graph.launches[0].kernel], "sgd_momentum_step_f32");
  EXPECT_EQ(it.graph.launches[0].touched.size(), 15u);
  for (auto& v : {&params, &grads, &bufs}) {
    for (auto& x : *v) ctx.release(x);
  }
}

// ---- never-replay list ----------------------------------------------------------------------------

TEST(GlobMatch, MatchesWholeNamesCaseInsensitively) {
  EXPECT_TRUE(glob_match("*nccl*", "_Z25ncclDevKernel_AllReducev"));
  EXPECT_TRUE(glob_match("NCCL*", "ncclKernel"));
  EXPECT_TRUE(glob_match("gemm_??_f32", "gemm_nt_f32"));
  EXPECT_FALSE(glob_match("gemm_??_f32", "gemm_n_f32"));
  EXPECT_FALSE(glob_match("nccl", "ncclKernel"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("a*b*c", "aXXbYYbc"));
  EXPECT_FALSE(glob_match("a*b*c", "aXXbYYb"));
}

TEST(NeverReplayList, DefaultsCoverCollectivesGroupedAndBatchedGemmButNotStridedBatched) {
  const never_replay_list d = never_replay_list::defaults();
  EXPECT_TRUE(d.matches("ncclDevKernel_AllGather_RING_LL"));
  EXPECT_TRUE(d.matches("_ZN7cutlass6KernelINS_4gemm6kernel13GroupedGemmE"));
  EXPECT_TRUE(d.matches("cutlass_grouped_gemm_kernel"));
  EXPECT_TRUE(d.matches("gemmBatched_kernel"));
  EXPECT_FALSE(d.matches("gemmStridedBatched_kernel"));
  EXPECT_TRUE(d.matches("sm90_gemm_KernelTmaWarpSpecializedPingpong"));
  EXPECT_FALSE(d.matches("gemm_nn_f32"));
  EXPECT_FALSE(d.matches("softmax_xent_fwd_f32"));
}

TEST(NeverReplayList, ParseExtendsAndTrimsTheDefaults) {
  const never_replay_list l = never_replay_list::parse(" default , !*batched*, my_allreduce* ,");
  EXPECT_TRUE(l.matches("ncclKernel"));
  EXPECT_FALSE(l.matches("gemmBatched_kernel"));
  EXPECT_TRUE(l.matches("my_allreduce_v2"));
  EXPECT_FALSE(never_replay_list::parse("").matches("ncclKernel"));
  EXPECT_THROW(static_cast<void>(never_replay_list::parse("a,!,b")), config_error);
}

TEST(NeverReplayList, ATensorMapShapedParameterIsRecognizedByLayout) {
  EXPECT_TRUE(has_tensor_map_param(std::vector<param_slot>{{0, 8}, {64, 128}}));
  EXPECT_FALSE(has_tensor_map_param(std::vector<param_slot>{{0, 8}, {72, 128}}));
  EXPECT_FALSE(has_tensor_map_param(std::vector<param_slot>{{0, 8}, {64, 120}}));
}

TEST(NeverReplayOnHostDevice, FlagsTheLaunchAndEveryBlockItTouches) {
  traced_session s;
  auto ctx = s.ctx();
  const std::size_t n = 64;
  auto* shared = static_cast<float*>(ctx.bytes(n * sizeof(float)));
  auto* other = static_cast<float*>(ctx.bytes(n * sizeof(float)));
  s.dev().memset_async(shared, 0, n * sizeof(float), nullptr);
  s.rec().mark_iteration();
  testing::launch(s.dev(), testing::scale_kernel(), testing::scale_params{shared, other, static_cast<std::int64_t>(n)});
  testing::launch(s.dev(), testing::fake_collective_kernel(), testing::fake_collective_params{shared, 4});
  s.rec().mark_iteration();
  const trace t = s.take();
  const analysed_iteration it = analyse(t, t.marked_iterations().at(0));
  ASSERT_EQ(it.graph.launches.size(), 2u);
  EXPECT_TRUE(it.graph.launches[0].replayable);
  EXPECT_FALSE(it.graph.launches[1].replayable);
  for (policy::buffer_id b = 0; b < it.graph.buffers.size(); ++b) {
    EXPECT_EQ(it.graph.buffers[b].never_evict, it.buffer_addresses[b] == addr(shared)) << "buffer " << b;
  }
  ctx.release_bytes(shared, n * sizeof(float));
  ctx.release_bytes(other, n * sizeof(float));
}

}  // namespace
}  // namespace sublinear::tracer
