// Streams, events, copies and host functions of the host device.
#include "device/host/device.hpp"

#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/resource.h>

#include <array>
#include <chrono>
#include <atomic>
#include <cstdint>
#include <latch>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "sublinear/error.hpp"
#include "test_kernels.hpp"

namespace sublinear::device::host {
namespace {

using testing::append;
using testing::stream_blocker;

std::vector<int> iota_vector(int n, int first = 0) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

// ---- streams ---------------------------------------------------------------------------

TEST(HostStream, RunsItsWorkInEnqueueOrder) {
  device dev;
  stream* s = dev.create_stream();
  std::vector<int> log;
  for (int i = 0; i < 2000; ++i) {
    append(dev, s, &log, i);
  }
  dev.synchronize(s);
  EXPECT_EQ(log, iota_vector(2000));
}

TEST(HostStream, DefaultStreamIsNullptrAndRunsInOrder) {
  device dev;
  std::vector<int> log;
  for (int i = 0; i < 100; ++i) {
    append(dev, i % 2 == 0 ? nullptr : dev.default_stream(), &log, i);
  }
  dev.synchronize(nullptr);
  EXPECT_EQ(log, iota_vector(100));
}

TEST(HostStream, LaunchReturnsBeforeTheKernelRuns) {
  device dev;
  std::vector<int> log;
  stream_blocker block(dev, nullptr);
  append(dev, nullptr, &log, 7);
  // Everything is still queued behind the blocker: launch did not run anything inline.
  EXPECT_FALSE(block.ran());
  EXPECT_FALSE(block.ran_on_caller());
  block.release();
  dev.synchronize();
  EXPECT_TRUE(block.ran());
  EXPECT_FALSE(block.ran_on_caller());
  EXPECT_EQ(log, std::vector<int>{7});
}

TEST(HostStream, KernelsRunOnAWorkerThreadNotTheCaller) {
  device dev;
  std::thread::id ran_on;
  dev.host_func(nullptr, [&] { ran_on = std::this_thread::get_id(); });
  dev.synchronize();
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_NE(ran_on, std::thread::id{});
}

TEST(HostStream, TheWorkerThreadIsNamedForProfilers) {
  // perf report --sort comm tells the stream's kernels from the host thread's work.
  device dev;
  std::array<char, 16> name{};
  dev.host_func(nullptr, [&] { pthread_getname_np(pthread_self(), name.data(), name.size()); });
  dev.synchronize();
  EXPECT_STREQ(name.data(), "sl-stream");
}

TEST(HostStream, StreamsRunIndependently) {
  device dev;
  stream* a = dev.create_stream();
  stream* b = dev.create_stream();
  stream_blocker block(dev, a);
  std::vector<int> log;
  append(dev, b, &log, 1);
  // b finishes while a is still held: streams do not serialize with each other.
  dev.synchronize(b);
  EXPECT_EQ(log, std::vector<int>{1});
  EXPECT_FALSE(block.ran());
  block.release();
  dev.synchronize(a);
  EXPECT_TRUE(block.ran());
}

TEST(HostStream, SynchronousModeRunsEachOperationInlineBeforeReturning) {
  device dev(device_options{.synchronous = true});
  EXPECT_TRUE(dev.synchronous());
  stream* s = dev.create_stream();
  std::vector<int> log;
  append(dev, s, &log, 1);
  EXPECT_EQ(log, std::vector<int>{1});  // no synchronize needed
  std::thread::id ran_on;
  dev.host_func(s, [&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  int dst = 0;
  const int src = 5;
  dev.memcpy_async(&dst, &src, sizeof src, s);
  EXPECT_EQ(dst, 5);
}

TEST(HostStream, SynchronousModeEventsCompleteWhenRecorded) {
  device dev(device_options{.synchronous = true});
  stream* a = dev.create_stream();
  stream* b = dev.create_stream();
  event* e = dev.create_event();
  std::vector<int> log;
  append(dev, a, &log, 1);
  dev.record_event(e, a);
  EXPECT_TRUE(dev.query_event(e));
  dev.stream_wait_event(b, e);  // must not block: the event has completed
  append(dev, b, &log, 2);
  EXPECT_EQ(log, (std::vector<int>{1, 2}));
  dev.destroy_event(e);
}

TEST(HostStream, DestroyStreamWaitsForItsQueuedWork) {
  device dev;
  stream* s = dev.create_stream();
  std::vector<int> log;
  for (int i = 0; i < 500; ++i) {
    append(dev, s, &log, i);
  }
  dev.destroy_stream(s);
  EXPECT_EQ(log, iota_vector(500));
}

TEST(HostStream, DeviceDestructorDrainsEveryStream) {
  std::vector<int> log_a;
  std::vector<int> log_b;
  {
    device dev;
    stream* a = dev.create_stream();
    for (int i = 0; i < 300; ++i) {
      append(dev, a, &log_a, i);
      append(dev, nullptr, &log_b, i);
    }
  }
  EXPECT_EQ(log_a, iota_vector(300));
  EXPECT_EQ(log_b, iota_vector(300));
}

TEST(HostStream, StreamIdsAreDenseFromZeroForTheDefaultStream) {
  device dev;
  EXPECT_EQ(dev.stream_id(nullptr), 0U);
  EXPECT_EQ(dev.stream_id(dev.default_stream()), 0U);
  stream* a = dev.create_stream();
  stream* b = dev.create_stream();
  EXPECT_EQ(dev.stream_id(a), 1U);
  EXPECT_EQ(dev.stream_id(b), 2U);
  dev.destroy_stream(a);
  EXPECT_EQ(dev.stream_id(dev.create_stream()), 3U);  // never reused
}

TEST(HostStream, ThreadsLaunchingOntoTheirOwnStreamsDoNotInterfere) {
  device dev;
  constexpr int threads = 4;
  constexpr int per_thread = 1000;
  std::array<std::vector<int>, threads> logs;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      stream* s = dev.create_stream();
      for (int i = 0; i < per_thread; ++i) {
        append(dev, s, &logs[static_cast<std::size_t>(t)], i);
      }
      dev.destroy_stream(s);
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  for (const auto& log : logs) {
    EXPECT_EQ(log, iota_vector(per_thread));
  }
}

TEST(HostStream, ThreadsSharingOneStreamLoseNoWork) {
  device dev;
  stream* s = dev.create_stream();
  std::atomic<int> count{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        dev.host_func(s, [&] { count.fetch_add(1, std::memory_order_relaxed); });
      }
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  dev.synchronize(s);
  EXPECT_EQ(count.load(), 2000);
}

// ---- copies, sets and host functions --------------------------------------------------

TEST(HostCopy, MemsetKernelAndMemcpyRunInStreamOrder) {
  device dev;
  stream* s = dev.create_stream();
  constexpr std::size_t n = 4096;
  std::vector<int> buf(n);
  std::vector<int> out(n);
  for (int round = 0; round < 50; ++round) {
    std::int64_t sum = -1;
    dev.memset_async(buf.data(), 0, n * sizeof(int), s);
    testing::fill_params fill{buf.data(), n / 2, round};
    dev.launch(testing::fill_kernel(), {}, s, &fill);
    dev.memcpy_async(out.data(), buf.data(), n * sizeof(int), s);
    testing::sum_params sum_p{out.data(), n, &sum};
    dev.launch(testing::sum_kernel(), {}, s, &sum_p);
    dev.synchronize(s);
    ASSERT_EQ(sum, static_cast<std::int64_t>(round) * static_cast<std::int64_t>(n / 2));
    ASSERT_EQ(out[n / 2], 0);
  }
}

TEST(HostCopy, MemsetWritesTheByteValue) {
  device dev;
  std::array<unsigned char, 64> buf{};
  dev.memset_async(buf.data() + 8, 0xAB, 16, nullptr);
  dev.synchronize();
  for (std::size_t i = 0; i < buf.size(); ++i) {
    EXPECT_EQ(buf[i], (i >= 8 && i < 24) ? 0xAB : 0) << "byte " << i;
  }
}

TEST(HostCopy, ZeroByteCopiesAcceptNullPointers) {
  device dev;
  dev.memcpy_async(nullptr, nullptr, 0, nullptr);
  dev.memset_async(nullptr, 0, 0, nullptr);
  dev.synchronize();
  SUCCEED();
}

TEST(HostFunc, RunsInOrderWithKernelsOnItsStream) {
  device dev;
  stream* s = dev.create_stream();
  std::vector<int> log;
  for (int i = 0; i < 100; i += 2) {
    append(dev, s, &log, i);
    dev.host_func(s, [&log, i] { log.push_back(i + 1); });
  }
  dev.synchronize(s);
  EXPECT_EQ(log, iota_vector(100));
}

// ---- events ------------------------------------------------------------------------------

TEST(HostEvent, NeverRecordedEventQueriesComplete) {
  device dev;
  event* e = dev.create_event();
  EXPECT_TRUE(dev.query_event(e));
  dev.synchronize_event(e);  // returns at once
  dev.destroy_event(e);
}

TEST(HostEvent, QueryIsFalseWhilePendingAndTrueAfter) {
  device dev;
  stream* s = dev.create_stream();
  event* e = dev.create_event();
  stream_blocker block(dev, s);
  dev.record_event(e, s);
  EXPECT_FALSE(dev.query_event(e));
  EXPECT_FALSE(dev.query_event(e));  // querying does not change it
  block.release();
  dev.synchronize_event(e);
  EXPECT_TRUE(dev.query_event(e));
  dev.destroy_event(e);
}

TEST(HostEvent, RecordCoversOnlyWorkQueuedBeforeIt) {
  device dev;
  stream* s = dev.create_stream();
  event* e = dev.create_event();
  std::vector<int> log;
  append(dev, s, &log, 1);
  dev.record_event(e, s);
  stream_blocker block(dev, s);  // queued after the record: must not delay it
  dev.synchronize_event(e);
  EXPECT_TRUE(dev.query_event(e));
  EXPECT_EQ(log, std::vector<int>{1});
  EXPECT_FALSE(block.ran());
  block.release();
  dev.destroy_event(e);
}

TEST(HostEvent, SynchronizeBlocksUntilTheWorkBeforeItIsDone) {
  device dev;
  stream* s = dev.create_stream();
  event* e = dev.create_event();
  stream_blocker block(dev, s);
  std::atomic<bool> after{false};
  dev.host_func(s, [&] { after.store(true); });
  dev.record_event(e, s);
  std::thread opener([&] { block.release(); });
  dev.synchronize_event(e);
  EXPECT_TRUE(after.load());
  opener.join();
  dev.destroy_event(e);
}

// A host thread waiting for an event sleeps until the event's work is done, not once per
// completed item before it (each wake is a futex call on the worker's critical path and a
// task switch for the waiter). Voluntary context switches of the waiting thread count
// its sleeps.
TEST(HostEvent, AWaiterIsWokenOnceItsWorkIsDoneNotAtEveryCompletion) {
  device dev;
  stream* s = dev.create_stream();
  event* e = dev.create_event();
  stream_blocker block(dev, s);
  constexpr int items = 400;
  std::atomic<int> ran{0};
  for (int i = 0; i < items; ++i) {
    dev.host_func(s, [&] {
      // A few microseconds of work, so the waiter could fall asleep between items.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      while (std::chrono::steady_clock::now() < until) {
      }
      ran.fetch_add(1);
    });
  }
  dev.record_event(e, s);
  // The release comes from another thread a little later, so that this thread is asleep
  // in synchronize_event while the items run (if it is not, nothing below can fail).
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    block.release();
  });
  rusage before{};
  ::getrusage(RUSAGE_THREAD, &before);
  dev.synchronize_event(e);
  rusage after{};
  ::getrusage(RUSAGE_THREAD, &after);
  opener.join();
  EXPECT_EQ(ran.load(), items);
  EXPECT_LT(after.ru_nvcsw - before.ru_nvcsw, items / 10)
      << "the waiter slept and woke about once per completed item";
  dev.destroy_event(e);
}

TEST(HostEvent, StreamWaitEventHoldsTheWaitingStream) {
  device dev;
  stream* a = dev.create_stream();
  stream* b = dev.create_stream();
  event* e = dev.create_event();
  event* done_b = dev.create_event();
  stream_blocker block(dev, a);
  dev.record_event(e, a);
  dev.stream_wait_event(b, e);
  std::atomic<bool> b_ran{false};
  dev.host_func(b, [&] { b_ran.store(true); });
  dev.record_event(done_b, b);
  EXPECT_FALSE(dev.query_event(done_b));
  EXPECT_FALSE(b_ran.load());
  block.release();
  dev.synchronize_event(done_b);
  EXPECT_TRUE(b_ran.load());
  dev.destroy_event(e);
  dev.destroy_event(done_b);
}

TEST(HostEvent, StreamWaitEventOrdersProducerAndConsumerAcrossStreams) {
  device dev;
  stream* producer = dev.create_stream();
  stream* consumer = dev.create_stream();
  event* produced = dev.create_event();
  event* consumed = dev.create_event();
  constexpr std::size_t n = 1 << 16;
  constexpr int rounds = 200;
  std::vector<int> buf(n);
  std::vector<std::int64_t> sums(rounds, -1);
  for (int r = 0; r < rounds; ++r) {
    // The producer may not overwrite the buffer before the previous round was read.
    dev.stream_wait_event(producer, consumed);
    testing::fill_params fill{buf.data(), n, r + 1};
    dev.launch(testing::fill_kernel(), {}, producer, &fill);
    dev.record_event(produced, producer);
    dev.stream_wait_event(consumer, produced);
    testing::sum_params sum{buf.data(), n, &sums[static_cast<std::size_t>(r)]};
    dev.launch(testing::sum_kernel(), {}, consumer, &sum);
    dev.record_event(consumed, consumer);
  }
  dev.synchronize();
  for (int r = 0; r < rounds; ++r) {
    ASSERT_EQ(sums[static_cast<std::size_t>(r)], static_cast<std::int64_t>(n) * (r + 1))
        << "round " << r;
  }
  dev.destroy_event(produced);
  dev.destroy_event(consumed);
}

TEST(HostEvent, WaitKeepsTheRecordCurrentWhenItWasEnqueued) {
  device dev;
  stream* a = dev.create_stream();
  stream* b = dev.create_stream();
  stream* c = dev.create_stream();
  event* e = dev.create_event();
  event* done_b = dev.create_event();
  stream_blocker block(dev, a);
  dev.record_event(e, a);       // pending
  dev.stream_wait_event(b, e);  // must wait for a's work
  dev.record_event(e, c);       // c is idle: this later record completes at once
  EXPECT_TRUE(dev.query_event(e));  // query reflects the latest record
  dev.record_event(done_b, b);
  EXPECT_FALSE(dev.query_event(done_b));  // b still waits for the earlier record
  block.release();
  dev.synchronize_event(done_b);
  EXPECT_TRUE(dev.query_event(done_b));
  dev.destroy_event(e);
  dev.destroy_event(done_b);
}

TEST(HostEvent, WaitIsNotExtendedByALaterPendingRecord) {
  device dev;
  stream* b = dev.create_stream();
  stream* c = dev.create_stream();
  event* e = dev.create_event();
  event* done_b = dev.create_event();
  dev.record_event(e, nullptr);
  dev.synchronize(nullptr);
  dev.stream_wait_event(b, e);  // refers to a completed record
  stream_blocker block(dev, c);
  dev.record_event(e, c);  // a later, pending record of the same event
  EXPECT_FALSE(dev.query_event(e));
  std::vector<int> log;
  append(dev, b, &log, 1);
  dev.record_event(done_b, b);
  dev.synchronize_event(done_b);  // would hang if b waited for c's record
  EXPECT_EQ(log, std::vector<int>{1});
  EXPECT_FALSE(block.ran());
  block.release();
  dev.destroy_event(e);
  dev.destroy_event(done_b);
}

TEST(HostEvent, EventOnADestroyedStreamStaysComplete) {
  device dev;
  stream* s = dev.create_stream();
  event* e = dev.create_event();
  std::vector<int> log;
  append(dev, s, &log, 1);
  dev.record_event(e, s);
  dev.destroy_stream(s);
  EXPECT_TRUE(dev.query_event(e));
  dev.synchronize_event(e);
  dev.stream_wait_event(nullptr, e);
  dev.synchronize();
  dev.destroy_event(e);
}

TEST(HostEvent, DestroyingAPendingEventDoesNotCancelAWaitOnIt) {
  device dev;
  stream* a = dev.create_stream();
  stream* b = dev.create_stream();
  event* e = dev.create_event();
  stream_blocker block(dev, a);
  dev.record_event(e, a);
  dev.stream_wait_event(b, e);
  dev.destroy_event(e);
  std::atomic<bool> b_ran{false};
  dev.host_func(b, [&] { b_ran.store(true); });
  event* done_b = dev.create_event();
  dev.record_event(done_b, b);
  EXPECT_FALSE(dev.query_event(done_b));
  block.release();
  dev.synchronize(b);
  EXPECT_TRUE(b_ran.load());
  dev.destroy_event(done_b);
}

// ---- ::sublinear::device::stream_events ---------------------------------------------------------

TEST(HostStreamEvents, RecordOnTheDefaultStreamHandleCompletesWithItsWork) {
  device dev;
  ::sublinear::device::stream_events& events = dev;
  stream_blocker block(dev, nullptr);
  ::sublinear::device::event_handle h = events.record(nullptr);
  EXPECT_FALSE(events.query(h));
  block.release();
  events.synchronize(h);
  EXPECT_TRUE(events.query(h));
  events.release(h);
}

TEST(HostStreamEvents, RecordOnAStreamHandleCoversThatStreamOnly) {
  device dev;
  ::sublinear::device::stream_events& events = dev;
  stream* s = dev.create_stream();
  stream_blocker block(dev, nullptr);
  ::sublinear::device::event_handle h = events.record(s);
  events.synchronize(h);  // the default stream's blocker does not hold it
  EXPECT_TRUE(events.query(h));
  events.release(h);
}

TEST(HostStreamEvents, ReleasedEventsAreReused) {
  device dev;
  ::sublinear::device::stream_events& events = dev;
  ::sublinear::device::event_handle first = events.record(nullptr);
  events.release(first);
  ::sublinear::device::event_handle second = events.record(nullptr);
  EXPECT_EQ(first, second);
  ::sublinear::device::event_handle third = events.record(nullptr);  // pool empty: a new one
  EXPECT_NE(third, second);
  events.release(second);
  events.release(third);
}

TEST(HostStreamEvents, AReusedEventReflectsItsNewRecordOnly) {
  device dev;
  ::sublinear::device::stream_events& events = dev;
  stream* a = dev.create_stream();
  stream* b = dev.create_stream();
  stream_blocker block(dev, a);
  ::sublinear::device::event_handle pending = events.record(a);
  events.release(pending);  // released while still pending, as the allocator may
  ::sublinear::device::event_handle reused = events.record(b);
  ASSERT_EQ(reused, pending);
  events.synchronize(reused);  // only b's (empty) work counts now
  EXPECT_TRUE(events.query(reused));
  events.release(reused);
}

TEST(HostStreamEvents, ManyThreadsRecordAndReleaseConcurrently) {
  device dev;
  ::sublinear::device::stream_events& events = dev;
  std::vector<std::thread> threads;
  std::atomic<int> completed{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      stream* s = dev.create_stream();
      for (int i = 0; i < 500; ++i) {
        dev.host_func(s, [] {});
        ::sublinear::device::event_handle h = events.record(s);
        events.synchronize(h);
        if (events.query(h)) {
          completed.fetch_add(1);
        }
        events.release(h);
      }
      dev.destroy_stream(s);
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(completed.load(), 2000);
}

// ---- argument errors -------------------------------------------------------------------

TEST(HostDeviceErrors, UnknownStreamIsAConfigError) {
  device dev;
  stream* s = dev.create_stream();
  dev.destroy_stream(s);
  std::vector<int> log;
  testing::append_params p{&log, 1};
  EXPECT_THROW(dev.launch(testing::append_kernel(), {}, s, &p), config_error);
  EXPECT_THROW(dev.host_func(s, [] {}), config_error);
  EXPECT_THROW(dev.synchronize(s), config_error);
  EXPECT_THROW(dev.destroy_stream(s), config_error);
  EXPECT_THROW((void)dev.record(s), config_error);
}

TEST(HostDeviceErrors, StreamOfAnotherDeviceIsAConfigError) {
  device one;
  device two;
  EXPECT_THROW(one.synchronize(two.create_stream()), config_error);
}

TEST(HostDeviceErrors, DefaultStreamCannotBeDestroyed) {
  device dev;
  EXPECT_THROW(dev.destroy_stream(nullptr), config_error);
  EXPECT_THROW(dev.destroy_stream(dev.default_stream()), config_error);
}

TEST(HostDeviceErrors, KernelWithoutBodyIsAConfigError) {
  device dev;
  kernel k;
  k.name = "no_body";
  EXPECT_THROW(dev.launch(k, {}, nullptr, nullptr), config_error);
  EXPECT_THROW(dev.launch_unpacked(k, {}, nullptr, nullptr), config_error);
}

TEST(HostDeviceErrors, MissingParametersAreAConfigError) {
  device dev;
  EXPECT_THROW(dev.launch(testing::append_kernel(), {}, nullptr, nullptr), config_error);
  EXPECT_THROW(dev.launch_unpacked(testing::append_kernel(), {}, nullptr, nullptr),
               config_error);
  std::vector<int> log;
  void* args[] = {nullptr, nullptr};
  std::vector<int>* log_ptr = &log;
  args[0] = &log_ptr;
  EXPECT_THROW(dev.launch_unpacked(testing::append_kernel(), {}, nullptr, args), config_error);
  dev.synchronize();
  EXPECT_TRUE(log.empty());  // nothing was queued
}

TEST(HostDeviceErrors, BadCopyAndHostFuncArgumentsAreConfigErrors) {
  device dev;
  int x = 0;
  EXPECT_THROW(dev.memcpy_async(nullptr, &x, sizeof x, nullptr), config_error);
  EXPECT_THROW(dev.memcpy_async(&x, nullptr, sizeof x, nullptr), config_error);
  EXPECT_THROW(dev.memset_async(nullptr, 0, 4, nullptr), config_error);
  EXPECT_THROW(dev.host_func(nullptr, std::function<void()>{}), config_error);
}

TEST(HostDeviceErrors, UnknownEventIsAConfigError) {
  device dev;
  event* e = dev.create_event();
  dev.destroy_event(e);
  EXPECT_THROW((void)dev.query_event(e), config_error);
  EXPECT_THROW(dev.record_event(e, nullptr), config_error);
  EXPECT_THROW(dev.stream_wait_event(nullptr, e), config_error);
  EXPECT_THROW(dev.destroy_event(e), config_error);
  EXPECT_THROW((void)dev.query_event(nullptr), config_error);
}

TEST(HostDeviceErrors, PooledEventCannotBeDestroyedDirectly) {
  device dev;
  ::sublinear::device::event_handle h = dev.record(nullptr);
  EXPECT_THROW(dev.destroy_event(static_cast<event*>(h)), config_error);
  dev.release(h);
}

}  // namespace
}  // namespace sublinear::device::host

namespace sublinear::device::host {
namespace {

// Note [Dynamic shared memory limit]: a launch above its kernel's dynamic shared memory
// limit is refused before it runs or any hook sees it, in both launch forms; the limit
// is per device and kernel, stays as last set, may be lowered below the default, and
// cannot be set above what the device offers.
TEST(HostSharedMemory, ALaunchAboveItsKernelsLimitIsRefusedUntilTheLimitIsRaised) {
  device dev;
  device other;
  std::vector<int> log;
  testing::append_params p{&log, 7};
  const kernel& k = testing::append_kernel();
  EXPECT_EQ(dev.max_dynamic_shared(k), device::default_dynamic_shared);
  launch_config big;
  big.shared_mem = device::default_dynamic_shared + 1;
  EXPECT_THROW(dev.launch(k, big, nullptr, &p), device_error);
  dev.set_max_dynamic_shared(k, big.shared_mem);
  dev.launch(k, big, nullptr, &p);
  EXPECT_THROW(other.launch(k, big, nullptr, &p), device_error) << "the limit is the device's own";

  launch_config small;
  small.shared_mem = 8 * 1024;
  dev.set_max_dynamic_shared(k, 2 * 1024);  // lowered below the default, as cuDNN leaves it
  try {
    dev.launch(k, small, nullptr, &p);
    ADD_FAILURE() << "8 KiB above a 2 KiB limit was launched";
  } catch (const device_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("test.append"), std::string::npos) << what;
    EXPECT_NE(what.find("8192"), std::string::npos) << what;
    EXPECT_NE(what.find("2048"), std::string::npos) << what;
  }
  void* args[] = {&p.log, &p.value};
  EXPECT_THROW(dev.launch_unpacked(k, small, nullptr, args), device_error);
  dev.launch(k, {}, nullptr, &p);  // no dynamic shared memory: always within the limit
  dev.set_max_dynamic_shared(k, small.shared_mem);
  dev.launch_unpacked(k, small, nullptr, args);
  dev.synchronize();
  EXPECT_EQ(log, (std::vector<int>{7, 7, 7}));
  EXPECT_THROW(dev.set_max_dynamic_shared(k, device::max_dynamic_shared_optin + 1), config_error);
  EXPECT_EQ(dev.max_dynamic_shared(k), small.shared_mem) << "a refused setting changes nothing";
}

}  // namespace
}  // namespace sublinear::device::host
