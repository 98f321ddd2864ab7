// The recorder and the host collector: what a trace holds after a run, and the parameter
// packing of CUDA's two launch forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "sublinear/error.hpp"
#include "tracer/param_packing.hpp"
#include "tracer/recorder.hpp"
#include "tracer_fixture.hpp"

namespace sublinear::tracer {
namespace {

using testing::addr;
using testing::of_kind;
using testing::traced_session;

TEST(Recorder, RecordsAllocationsAndFreesWithTheirSizes) {
  traced_session s;
  auto ctx = s.ctx();
  void* a = ctx.bytes(1000);
  void* b = ctx.bytes(5000);
  ctx.release_bytes(a, 1000);
  const trace t = s.take();
  auto allocs = of_kind(t, event_kind::alloc);
  auto frees = of_kind(t, event_kind::free);
  ASSERT_EQ(allocs.size(), 2u);
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(allocs[0]->address, addr(a));
  EXPECT_EQ(allocs[0]->bytes, 1000u);
  EXPECT_EQ(allocs[1]->address, addr(b));
  EXPECT_EQ(allocs[1]->bytes, 5000u);
  EXPECT_EQ(frees[0]->address, addr(a));
  EXPECT_EQ(frees[0]->bytes, 1000u);
  for (std::size_t i = 1; i < t.events.size(); ++i) {
    EXPECT_GT(t.events[i].seq, t.events[i - 1].seq);
    EXPECT_GE(t.events[i].time_ns, t.events[i - 1].time_ns);
  }
  ctx.release_bytes(b, 5000);
}

TEST(Recorder, BeginsATraceWithEveryBlockLiveWhenRecordingStarted) {
  recorder_options o;
  o.start_recording = false;
  traced_session s({}, o);
  auto ctx = s.ctx();
  void* a = ctx.bytes(100);
  void* b = ctx.bytes(200);
  EXPECT_EQ(s.rec().event_count(), 0u);
  s.rec().start();
  void* c = ctx.bytes(300);
  trace t = s.take();
  auto allocs = of_kind(t, event_kind::alloc);
  ASSERT_EQ(allocs.size(), 3u);
  std::set<std::uint64_t> pre;
  for (int i = 0; i < 2; ++i) {
    EXPECT_NE(allocs[static_cast<std::size_t>(i)]->flags & event_flags::preexisting, 0);
    pre.insert(allocs[static_cast<std::size_t>(i)]->address);
  }
  EXPECT_EQ(pre, (std::set<std::uint64_t>{addr(a), addr(b)}));
  EXPECT_EQ(allocs[2]->address, addr(c));
  EXPECT_EQ(allocs[2]->flags & event_flags::preexisting, 0);

  // The next trace starts over from what is live then: a, b and c, then a's free...
  ctx.release_bytes(a, 100);
  t = s.take();
  allocs = of_kind(t, event_kind::alloc);
  ASSERT_EQ(allocs.size(), 3u);
  EXPECT_TRUE(std::all_of(allocs.begin(), allocs.end(),
                          [](const event* e) { return (e->flags & event_flags::preexisting) != 0; }));
  ASSERT_EQ(of_kind(t, event_kind::free).size(), 1u);
  // ... and the one after that from b and c alone.
  t = s.take();
  allocs = of_kind(t, event_kind::alloc);
  ASSERT_EQ(allocs.size(), 2u);
  EXPECT_EQ(t.events.size(), 2u);
  EXPECT_TRUE(std::all_of(allocs.begin(), allocs.end(),
                          [](const event* e) { return (e->flags & event_flags::preexisting) != 0; }));
  ctx.release_bytes(b, 200);
  ctx.release_bytes(c, 300);
}

TEST(Recorder, RecordsALaunchWithItsDimensionsStreamAndParameterBytes) {
  traced_session s;
  auto ctx = s.ctx();
  device::host::stream* side = s.dev().create_stream();
  auto* in = static_cast<float*>(ctx.bytes(64));
  auto* out = static_cast<float*>(ctx.bytes(64));
  const testing::scale_params p{in, out, 16};
  device::host::launch_config cfg;
  cfg.grid = {3, 2, 1};
  cfg.block = {128, 1, 1};
  cfg.shared_mem = 256;
  s.dev().launch(testing::scale_kernel(), cfg, side, &p);
  const trace t = s.take();
  auto launches = of_kind(t, event_kind::launch);
  ASSERT_EQ(launches.size(), 1u);
  const event& e = *launches[0];
  EXPECT_EQ(e.grid, (dims{3, 2, 1}));
  EXPECT_EQ(e.block, (dims{128, 1, 1}));
  EXPECT_EQ(e.shared_mem, 256u);
  ASSERT_LT(e.stream, t.streams.size());
  EXPECT_EQ(t.streams[e.stream], addr(side));
  EXPECT_NE(e.stream, 0u);
  ASSERT_EQ(e.bytes, sizeof p);
  EXPECT_EQ(e.param_offset % arena_alignment, 0u);
  EXPECT_EQ(std::memcmp(t.params(e).data(), &p, sizeof p), 0);
  const kernel_info& k = t.kernels.at(e.kernel);
  EXPECT_EQ(k.name, "tracer_test.scale");
  EXPECT_EQ(k.param_bytes, sizeof p);
  EXPECT_EQ(k.params, (std::vector<param_slot>{{0, 8}, {8, 8}, {16, 8}}));
  EXPECT_FALSE(k.never_replay);
  s.dev().synchronize();
  s.dev().destroy_stream(side);
  ctx.release_bytes(in, 64);
  ctx.release_bytes(out, 64);
}

TEST(Recorder, RegistersEachKernelOnceAndRecordsUnpackedLaunchesPacked) {
  traced_session s;
  auto ctx = s.ctx();
  auto* in = static_cast<float*>(ctx.bytes(64));
  auto* out = static_cast<float*>(ctx.bytes(64));
  const testing::scale_params p{in, out, 16};
  testing::launch(s.dev(), testing::scale_kernel(), p);
  const float* in_arg = in;
  float* out_arg = out;
  std::int64_t n_arg = 16;
  void* args[] = {&in_arg, &out_arg, &n_arg};
  s.dev().launch_unpacked(testing::scale_kernel(), {}, nullptr, args);
  const trace t = s.take();
  auto launches = of_kind(t, event_kind::launch);
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(t.kernels.size(), 1u);
  EXPECT_EQ(launches[0]->kernel, launches[1]->kernel);
  ASSERT_EQ(t.params(*launches[0]).size(), t.params(*launches[1]).size());
  EXPECT_TRUE(std::equal(t.params(*launches[0]).begin(), t.params(*launches[0]).end(),
                         t.params(*launches[1]).begin()));
  ctx.release_bytes(in, 64);
  ctx.release_bytes(out, 64);
}

// The next observer in the chain (the replay engine) decides placement; the recorder only
// passes the questions on (Note [Pack segments] in allocator/detail/pack_table.hpp).
struct placing_observer final : allocator::allocation_observer {
  int evictable_asked = 0, slot_asked = 0;
  bool place_evictable(std::size_t, device::stream_handle) override {
    ++evictable_asked;
    return true;
  }
  std::optional<allocator::pack_slot> pack_slot_for(std::size_t size, device::stream_handle) override {
    ++slot_asked;
    return allocator::pack_slot{7, 4 * size, size};
  }
};

TEST(Recorder, ForwardsPlacementAndPackQuestionsToTheNextObserver) {
  recorder rec;
  EXPECT_FALSE(rec.place_evictable(512, nullptr)) << "no next observer: plain placement";
  EXPECT_FALSE(rec.pack_slot_for(512, nullptr).has_value());
  placing_observer next;
  rec.set_next(&next);
  EXPECT_TRUE(rec.place_evictable(512, nullptr));
  const std::optional<allocator::pack_slot> slot = rec.pack_slot_for(512, nullptr);
  ASSERT_TRUE(slot.has_value());
  EXPECT_EQ(slot->key, 7u);
  EXPECT_EQ(slot->bytes, 2048u);
  EXPECT_EQ(slot->offset, 512u);
  EXPECT_EQ(next.evictable_asked, 1);
  EXPECT_EQ(next.slot_asked, 1);
}

TEST(Recorder, AnAllocationAtALiveAddressClosesTheOldBlockAndDropsItsLateFree) {
  // The allocator reports frees after releasing its lock, so another thread may be handed
  // the same address and report it first.
  recorder rec;
  char storage[64];
  rec.on_allocate(storage, 64, nullptr, false);
  rec.on_allocate(storage, 32, nullptr, false);  // the free of the first is still on its way
  rec.on_free(storage, 64, nullptr);             // ... and arrives now: already accounted for
  EXPECT_EQ(rec.live_blocks(), 1u);
  rec.on_free(storage, 32, nullptr);
  EXPECT_EQ(rec.live_blocks(), 0u);
  const trace t = rec.take();
  ASSERT_EQ(t.events.size(), 4u);
  EXPECT_EQ(t.events[0].kind, event_kind::alloc);
  EXPECT_EQ(t.events[1].kind, event_kind::free);
  EXPECT_EQ(t.events[1].bytes, 64u);
  EXPECT_EQ(t.events[2].kind, event_kind::alloc);
  EXPECT_EQ(t.events[3].kind, event_kind::free);
  EXPECT_EQ(t.events[3].bytes, 32u);
}

TEST(Recorder, AStoppedRecorderRecordsNothingButStillTracksBlocks) {
  recorder_options o;
  o.start_recording = false;
  traced_session s({}, o);
  auto ctx = s.ctx();
  auto* in = static_cast<float*>(ctx.bytes(64));
  auto* out = static_cast<float*>(ctx.bytes(64));
  testing::launch(s.dev(), testing::scale_kernel(), testing::scale_params{in, out, 16});
  EXPECT_EQ(s.rec().event_count(), 0u);
  const testing::scale_params p{in + 3, out, 16};
  const auto blocks = s.rec().touched_blocks({reinterpret_cast<const std::byte*>(&p), sizeof p});
  std::vector<std::uint64_t> bases;
  for (const block_extent& b : blocks) bases.push_back(b.base);
  std::vector<std::uint64_t> expected = {addr(in), addr(out)};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(bases, expected);
  ctx.release_bytes(in, 64);
  ctx.release_bytes(out, 64);
}

TEST(HostCollector, TimedLaunchesCarryTheirMeasuredDuration) {
  host_collector_options c;
  c.time_launches = true;
  traced_session s(c);
  auto ctx = s.ctx();
  const std::int64_t n = 1 << 16;
  auto* in = static_cast<float*>(ctx.bytes(n * sizeof(float)));
  auto* out = static_cast<float*>(ctx.bytes(n * sizeof(float)));
  s.dev().memset_async(in, 0, n * sizeof(float), nullptr);
  testing::launch(s.dev(), testing::scale_kernel(), testing::scale_params{in, out, n});
  const trace t = s.take();
  auto launches = of_kind(t, event_kind::launch);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_NE(launches[0]->flags & event_flags::timed, 0);
  EXPECT_GT(launches[0]->duration_ns, 0u);
  ctx.release_bytes(in, n * sizeof(float));
  ctx.release_bytes(out, n * sizeof(float));
}

TEST(HostCollector, ObservedWritesListOnlyTheBlocksAKernelChanged) {
  host_collector_options c;
  c.observe_writes = true;
  traced_session s(c);
  auto ctx = s.ctx();
  const std::int64_t n = 256;
  auto* in = static_cast<float*>(ctx.bytes(n * sizeof(float)));
  auto* out = static_cast<float*>(ctx.bytes(n * sizeof(float)));
  std::vector<float> ones(static_cast<std::size_t>(n), 1.0f);
  s.dev().memcpy_async(in, ones.data(), n * sizeof(float), nullptr);
  s.dev().memset_async(out, 0, n * sizeof(float), nullptr);
  testing::launch(s.dev(), testing::scale_kernel(), testing::scale_params{in, out, n});
  testing::launch(s.dev(), testing::fake_collective_kernel(), testing::fake_collective_params{out, n});
  const trace t = s.take();
  auto launches = of_kind(t, event_kind::launch);
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_NE(launches[0]->flags & event_flags::writes_observed, 0);
  auto w0 = t.writes_of(launches[0]->seq);
  ASSERT_EQ(w0.size(), 1u);
  EXPECT_EQ(w0[0].address, addr(out));
  // Observed, and it wrote nothing.
  EXPECT_NE(launches[1]->flags & event_flags::writes_observed, 0);
  EXPECT_TRUE(t.writes_of(launches[1]->seq).empty());
  ctx.release_bytes(in, n * sizeof(float));
  ctx.release_bytes(out, n * sizeof(float));
}

// An observing session with two blocks of `n` floats, `a` copied from ones (the hash-reuse
// tests below).
struct observed_pair {
  static constexpr std::int64_t n = 256;
  static constexpr std::size_t bytes = n * sizeof(float);
  explicit observed_pair(bool reuse) : s(options(reuse)), ctx(s.ctx()) {
    a = static_cast<float*>(ctx.bytes(bytes));
    b = static_cast<float*>(ctx.bytes(bytes));
    s.dev().memcpy_async(a, ones.data(), bytes, nullptr);
  }
  ~observed_pair() {
    s.dev().synchronize();
    ctx.release_bytes(a, bytes);
    ctx.release_bytes(b, bytes);
  }
  observed_pair(const observed_pair&) = delete;
  observed_pair& operator=(const observed_pair&) = delete;
  void scale(const float* in, float* out) {
    testing::launch(s.dev(), testing::scale_kernel(), testing::scale_params{in, out, n});
  }
  void leave_alone(float* x) {  // touches x, writes nothing
    testing::launch(s.dev(), testing::fake_collective_kernel(), testing::fake_collective_params{x, n});
  }
  // The blocks each recorded launch wrote, in order.
  std::vector<std::vector<std::uint64_t>> writes() {
    const trace t = s.take();
    std::vector<std::vector<std::uint64_t>> out;
    for (const event* e : of_kind(t, event_kind::launch)) {
      out.emplace_back();
      for (const write_record& w : t.writes_of(e->seq)) out.back().push_back(w.address);
    }
    return out;
  }
  static host_collector_options options(bool reuse) {
    host_collector_options c;
    c.observe_writes = true;
    c.reuse_hashes = reuse;
    return c;
  }

  traced_session s;
  workloads::context ctx;
  std::vector<float> ones = std::vector<float>(static_cast<std::size_t>(n), 1.0f);
  std::vector<float> threes = std::vector<float>(static_cast<std::size_t>(n), 3.0f);
  float* a = nullptr;
  float* b = nullptr;
};

// Note [Hash reuse]: a block's hash before a kernel may come from the kernel that last
// touched it; what each kernel wrote must come out as when every block is hashed anew.
TEST(HostCollector, WithKeptHashesEachKernelStillShowsExactlyWhatItWrote) {
  for (const bool reuse : {false, true}) {
    SCOPED_TRACE(reuse ? "hashes reused" : "every block hashed before every kernel");
    observed_pair p(reuse);
    p.s.dev().memset_async(p.b, 0, p.bytes, nullptr);
    p.scale(p.a, p.b);  // writes b
    p.scale(p.b, p.a);  // writes a
    p.scale(p.a, p.b);  // writes b
    p.leave_alone(p.b);
    p.s.dev().synchronize();
    const host_collector::before_counts counts = p.s.collector().before_hashes();
    const std::vector<std::vector<std::uint64_t>> expected = {{addr(p.b)}, {addr(p.a)}, {addr(p.b)}, {}};
    EXPECT_EQ(p.writes(), expected);
    // Seven blocks are observed before the four kernels. Reusing, only the first kernel's
    // two (written by a copy and a set, never hashed) are read there.
    EXPECT_EQ(counts.hashed + counts.reused, 7u);
    EXPECT_EQ(counts.reused, reuse ? 5u : 0u);
    EXPECT_EQ(p.s.collector().kept_hash_count(), reuse ? 2u : 0u);
  }
}

// A copy or a set changes a block no kernel touched: its kept hash must not be taken for
// the next kernel's "before", or that kernel would seem to write what the copy wrote.
TEST(HostCollector, ACopyOrSetBetweenKernelsIsNotTakenForTheNextKernelsWrite) {
  for (const bool set : {false, true}) {
    SCOPED_TRACE(set ? "a set" : "a copy");
    observed_pair p(true);
    p.scale(p.a, p.b);  // keeps a's hash
    if (set) {
      p.s.dev().memset_async(p.a + 8, 0, 16 * sizeof(float), nullptr);  // part of a only
    } else {
      p.s.dev().memcpy_async(p.a, p.threes.data(), p.bytes, nullptr);
    }
    p.leave_alone(p.a);
    const std::vector<std::vector<std::uint64_t>> expected = {{addr(p.b)}, {}};
    EXPECT_EQ(p.writes(), expected) << "the copy's or set's write was taken for the kernel's";
  }
}

// A kernel run while nothing is recorded is not observed: every hash kept before it is
// stale once it has run.
TEST(HostCollector, AKernelRunWhileNotRecordingMakesEveryKeptHashStale) {
  observed_pair p(true);
  p.scale(p.a, p.b);  // keeps a's and b's hashes
  p.s.rec().stop();
  p.scale(p.b, p.a);  // rewrites a, unobserved
  p.s.rec().start();
  p.leave_alone(p.a);
  const std::vector<std::vector<std::uint64_t>> expected = {{}};
  EXPECT_EQ(p.writes(), expected) << "the unobserved kernel's write was taken for this one's";
}

TEST(KeptHashes, AHashServesOnlyTheSameAllocationInTheSameEpoch) {
  kept_hashes k;
  k.keep({0x1000, 0x100, 7}, 3, 42);
  std::uint64_t h = 0;
  EXPECT_TRUE(k.find({0x1000, 0x100, 7}, 3, h));
  EXPECT_EQ(h, 42u);
  EXPECT_FALSE(k.find({0x1000, 0x100, 8}, 3, h)) << "a later block at the same address";
  EXPECT_FALSE(k.find({0x1000, 0x80, 7}, 3, h)) << "another size";
  EXPECT_FALSE(k.find({0x1000, 0x100, 7}, 4, h)) << "a later epoch";
}

TEST(KeptHashes, KeepingOrDroppingARangeDropsEveryHashItOverlaps) {
  kept_hashes k;
  k.keep({0x1000, 0x100, 1}, 0, 1);
  k.keep({0x1100, 0x100, 2}, 0, 2);
  k.keep({0x1200, 0x100, 3}, 0, 3);
  k.keep({0x1400, 0x100, 4}, 0, 4);
  EXPECT_EQ(k.size(), 4u);
  k.keep({0x10c0, 0x100, 5}, 0, 5);  // reaches into the first and the second
  EXPECT_EQ(k.size(), 3u);
  std::uint64_t h = 0;
  EXPECT_FALSE(k.find({0x1000, 0x100, 1}, 0, h));
  EXPECT_FALSE(k.find({0x1100, 0x100, 2}, 0, h));
  EXPECT_TRUE(k.find({0x10c0, 0x100, 5}, 0, h));
  k.drop(0x11bf, 0x42);  // the last byte of the new one to the first of the third
  EXPECT_FALSE(k.find({0x10c0, 0x100, 5}, 0, h));
  EXPECT_FALSE(k.find({0x1200, 0x100, 3}, 0, h));
  EXPECT_TRUE(k.find({0x1400, 0x100, 4}, 0, h));
  k.drop(0x1300, 0x100);  // touches nothing kept
  EXPECT_EQ(k.size(), 1u);
}

TEST(HostCollector, LaunchesFromSeveralThreadsAreAllRecordedInEachThreadsOrder) {
  traced_session s;
  auto ctx = s.ctx();
  auto* in = static_cast<float*>(ctx.bytes(64));
  auto* out = static_cast<float*>(ctx.bytes(64));
  constexpr int threads = 4;
  constexpr int per_thread = 200;
  std::vector<device::host::stream*> streams;
  for (int i = 0; i < threads; ++i) streams.push_back(s.dev().create_stream());
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&, i] {
      for (int k = 0; k < per_thread; ++k) {
        // n encodes (thread, k) so the order can be checked; n <= 16 keeps the body in bounds.
        testing::scale_params p{in, out, 0};
        p.n = 0;
        device::host::launch_config cfg;
        cfg.grid = {static_cast<std::uint32_t>(i + 1), static_cast<std::uint32_t>(k + 1), 1};
        s.dev().launch(testing::scale_kernel(), cfg, streams[static_cast<std::size_t>(i)], &p);
      }
    });
  }
  for (auto& w : workers) w.join();
  const trace t = s.take();
  auto launches = of_kind(t, event_kind::launch);
  ASSERT_EQ(launches.size(), static_cast<std::size_t>(threads * per_thread));
  std::vector<std::uint32_t> next(threads + 1, 1);
  for (const event* e : launches) {
    const std::uint32_t thread = e->grid.x;
    EXPECT_EQ(e->grid.y, next[thread]) << "thread " << thread;
    next[thread] = e->grid.y + 1;
    EXPECT_EQ(t.streams[e->stream], addr(streams[thread - 1]));
  }
  for (device::host::stream* st : streams) s.dev().destroy_stream(st);
  ctx.release_bytes(in, 64);
  ctx.release_bytes(out, 64);
}

TEST(HostCollector, RecordsCopiesSetsAndEventsFromTheDeviceHooks) {
  traced_session s;
  auto ctx = s.ctx();
  auto* dev_a = static_cast<float*>(ctx.bytes(64));
  auto* dev_b = static_cast<float*>(ctx.bytes(64));
  float host_buf[16] = {};
  device::host::stream* side = s.dev().create_stream();
  device::host::event* ev = s.dev().create_event();
  s.dev().memcpy_async(dev_a, host_buf, sizeof host_buf, nullptr);
  s.dev().memcpy_async(dev_b, dev_a, sizeof host_buf, nullptr);
  s.dev().memcpy_async(host_buf, dev_b, sizeof host_buf, nullptr);
  s.dev().memset_async(dev_a, 7, 32, nullptr);
  s.dev().record_event(ev, nullptr);
  s.dev().stream_wait_event(side, ev);
  const trace t = s.take();
  auto copies = of_kind(t, event_kind::memcpy);
  ASSERT_EQ(copies.size(), 3u);
  EXPECT_EQ(copies[0]->copy, copy_kind::host_to_device);
  EXPECT_EQ(copies[1]->copy, copy_kind::device_to_device);
  EXPECT_EQ(copies[1]->address, addr(dev_b));
  EXPECT_EQ(copies[1]->source, addr(dev_a));
  EXPECT_EQ(copies[2]->copy, copy_kind::device_to_host);
  auto sets = of_kind(t, event_kind::memset);
  ASSERT_EQ(sets.size(), 1u);
  EXPECT_EQ(sets[0]->bytes, 32u);
  EXPECT_EQ(sets[0]->source, 7u);
  auto records = of_kind(t, event_kind::event_record);
  auto waits = of_kind(t, event_kind::event_wait);
  ASSERT_EQ(records.size(), 1u);
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(records[0]->address, waits[0]->address);
  EXPECT_EQ(t.streams[waits[0]->stream], addr(side));
  s.dev().synchronize();
  s.dev().destroy_event(ev);
  s.dev().destroy_stream(side);
  ctx.release_bytes(dev_a, 64);
  ctx.release_bytes(dev_b, 64);
}

TEST(Recorder, TheCMarkerReachesTheDefaultRecorderUntilItIsDestroyed) {
  {
    recorder rec;
    set_default_recorder(&rec);
    sublinear_mark_iteration();
    sublinear_mark_iteration();
    const trace t = rec.take();
    ASSERT_EQ(t.events.size(), 2u);
    EXPECT_EQ(t.events[0].kind, event_kind::marker);
    EXPECT_EQ(t.events[0].address, 0u);
    EXPECT_EQ(t.events[1].address, 1u);
  }
  EXPECT_EQ(default_recorder(), nullptr);
  sublinear_mark_iteration();  // no recorder: a no-op, not a crash
}

// ---- parameter packing ----------------------------------------------------------------------------

struct packed_example {
  const float* in;
  std::int32_t n;  // 4 bytes of padding follow
  double scale;
  std::uint8_t flag;
};

const std::vector<param_slot> example_layout = {
    {static_cast<std::uint32_t>(offsetof(packed_example, in)), 8},
    {static_cast<std::uint32_t>(offsetof(packed_example, n)), 4},
    {static_cast<std::uint32_t>(offsetof(packed_example, scale)), 8},
    {static_cast<std::uint32_t>(offsetof(packed_example, flag)), 1},
};

TEST(ParamPacking, KernelParamsAndExtraFormsGiveTheSamePackedBlock) {
  packed_example v;
  std::memset(&v, 0, sizeof v);
  v.in = reinterpret_cast<const float*>(0x1234560);
  v.n = 7;
  v.scale = 0.5;
  v.flag = 1;
  const float* in = v.in;
  std::int32_t n = v.n;
  double scale = v.scale;
  std::uint8_t flag = v.flag;
  void* kernel_params[] = {&in, &n, &scale, &flag};
  std::vector<std::byte> a, b;
  pack_kernel_params(example_layout, kernel_params, a);
  // The device-layout buffer ends with the last parameter, not at sizeof's padding.
  std::size_t size = packed_size(example_layout);
  void* extra[] = {reinterpret_cast<void*>(launch_param_buffer_pointer), &v,
                   reinterpret_cast<void*>(launch_param_buffer_size), &size,
                   reinterpret_cast<void*>(launch_param_end)};
  pack_extra(extra, b);
  ASSERT_EQ(a.size(), offsetof(packed_example, flag) + 1);
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::memcmp(a.data(), &v, a.size()), 0);
}

TEST(ParamPacking, RejectsNullArgumentsAndMalformedExtraLists) {
  std::vector<std::byte> out;
  EXPECT_THROW(pack_kernel_params(example_layout, nullptr, out), config_error);
  const float* in = nullptr;
  void* missing[] = {&in, nullptr, nullptr, nullptr};
  EXPECT_THROW(pack_kernel_params(example_layout, missing, out), config_error);
  std::size_t size = 16;
  char buffer[16] = {};
  void* no_pointer[] = {reinterpret_cast<void*>(launch_param_buffer_size), &size, nullptr};
  EXPECT_THROW(pack_extra(no_pointer, out), config_error);
  void* unknown[] = {reinterpret_cast<void*>(std::uintptr_t{9}), buffer, nullptr};
  EXPECT_THROW(pack_extra(unknown, out), config_error);
  std::size_t huge = 1 << 20;
  void* too_big[] = {reinterpret_cast<void*>(launch_param_buffer_pointer), buffer,
                     reinterpret_cast<void*>(launch_param_buffer_size), &huge, nullptr};
  EXPECT_THROW(pack_extra(too_big, out), config_error);
  pack_extra(nullptr, out);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace sublinear::tracer
