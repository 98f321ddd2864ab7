// Launch interception on the host device: what hooks see, and when.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <latch>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "device/host/device.hpp"
#include "sublinear/error.hpp"
#include "test_kernels.hpp"

namespace sublinear::device::host {
namespace {

using testing::append;

// A parameter struct with padding and a by-value member, like real kernels have.
struct mixed_params {
  const float* in;
  float* out;
  std::int32_t n;  // 4 bytes of padding follow
  double scale;
  std::uint8_t flag;
};

void mixed_body(const launch_config&, const mixed_params& p) {
  for (std::int32_t i = 0; i < p.n; ++i) {
    p.out[i] = static_cast<float>(p.in[i] * p.scale) + (p.flag != 0 ? 1.0F : 0.0F);
  }
}

const kernel& mixed_kernel() {
  static const kernel& k = register_kernel<mixed_params, mixed_body>(
      "test.hooks.mixed",
      {SUBLINEAR_PARAM(mixed_params, in), SUBLINEAR_PARAM(mixed_params, out),
       SUBLINEAR_PARAM(mixed_params, n), SUBLINEAR_PARAM(mixed_params, scale),
       SUBLINEAR_PARAM(mixed_params, flag)});
  return k;
}

mixed_params make_mixed(const float* in, float* out, std::int32_t n) {
  mixed_params p;
  std::memset(&p, 0, sizeof p);  // padding bytes are zero, as launch_unpacked makes them
  p.in = in;
  p.out = out;
  p.n = n;
  p.scale = 2.0;
  p.flag = 1;
  return p;
}

// Copies what it sees; thread-safe so several launching threads may share it.
class recording_hook : public launch_hook {
 public:
  struct seen {
    bool enter;
    const kernel* fn;
    launch_config config;
    stream* on;
    std::vector<std::byte> params;
    std::uint64_t correlation_id;
  };

  void on_enter(const launch_record& rec) override { note(true, rec); }
  void on_exit(const launch_record& rec) override { note(false, rec); }

  std::vector<seen> take() {
    std::lock_guard lock(mutex_);
    return std::move(seen_);
  }

 private:
  void note(bool enter, const launch_record& rec) {
    std::lock_guard lock(mutex_);
    seen_.push_back({enter, rec.fn, rec.config, rec.on,
                     std::vector<std::byte>(rec.params, rec.params + rec.param_bytes),
                     rec.correlation_id});
  }

  std::mutex mutex_;
  std::vector<seen> seen_;
};

std::vector<std::byte> bytes_of(const void* p, std::size_t n) {
  const auto* b = static_cast<const std::byte*>(p);
  return {b, b + n};
}

// Registers a hook for the lifetime of a scope.
class scoped_hook {
 public:
  scoped_hook(device& dev, launch_hook* hook) : dev_(dev), hook_(hook) { dev_.add_hook(hook_); }
  ~scoped_hook() { dev_.remove_hook(hook_); }
  scoped_hook(const scoped_hook&) = delete;
  scoped_hook& operator=(const scoped_hook&) = delete;

 private:
  device& dev_;
  launch_hook* hook_;
};

TEST(HostLaunchHooks, EnterSeesTheExactParameterBytesLayoutAndConfig) {
  device dev;
  stream* s = dev.create_stream();
  recording_hook hook;
  scoped_hook reg(dev, &hook);
  std::vector<float> in(8, 1.5F);
  std::vector<float> out(8);
  mixed_params p = make_mixed(in.data(), out.data(), 8);
  launch_config cfg{{3, 2, 1}, {128, 1, 1}, 256};
  dev.launch(mixed_kernel(), cfg, s, &p);
  dev.synchronize(s);

  auto seen = hook.take();
  ASSERT_EQ(seen.size(), 2U);
  const auto& enter = seen[0];
  EXPECT_TRUE(enter.enter);
  EXPECT_EQ(enter.fn, &mixed_kernel());
  EXPECT_EQ(enter.on, s);
  EXPECT_EQ(enter.config.grid.x, 3U);
  EXPECT_EQ(enter.config.grid.y, 2U);
  EXPECT_EQ(enter.config.block.x, 128U);
  EXPECT_EQ(enter.config.shared_mem, 256U);
  EXPECT_EQ(enter.params, bytes_of(&p, sizeof p));
  // The layout tells a pointer scanner where each argument lives.
  const kernel& k = *enter.fn;
  ASSERT_EQ(k.params.size(), 5U);
  EXPECT_EQ(k.param_bytes, sizeof(mixed_params));
  EXPECT_EQ(k.params[3].offset, offsetof(mixed_params, scale));
  EXPECT_EQ(k.params[3].size, sizeof(double));
  const float* in_seen = nullptr;
  std::memcpy(&in_seen, enter.params.data() + k.params[0].offset, sizeof in_seen);
  EXPECT_EQ(in_seen, in.data());
  EXPECT_EQ(out[0], 4.0F);  // the kernel ran with those parameters
}

TEST(HostLaunchHooks, DefaultStreamLaunchReportsTheDefaultStream) {
  device dev;
  recording_hook hook;
  scoped_hook reg(dev, &hook);
  std::vector<int> log;
  append(dev, nullptr, &log, 1);
  dev.synchronize();
  auto seen = hook.take();
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_EQ(seen[0].on, dev.default_stream());
}

TEST(HostLaunchHooks, ExitFollowsEnterWithTheSameCorrelationId) {
  device dev;
  recording_hook hook;
  scoped_hook reg(dev, &hook);
  std::vector<int> log;
  for (int i = 0; i < 5; ++i) {
    append(dev, nullptr, &log, i);
  }
  dev.synchronize();
  auto seen = hook.take();
  ASSERT_EQ(seen.size(), 10U);
  for (std::size_t i = 0; i < seen.size(); i += 2) {
    EXPECT_TRUE(seen[i].enter);
    EXPECT_FALSE(seen[i + 1].enter);
    EXPECT_EQ(seen[i].correlation_id, seen[i + 1].correlation_id);
    EXPECT_EQ(seen[i].params, seen[i + 1].params);
  }
}

TEST(HostLaunchHooks, CorrelationIdsIncreaseByOnePerLaunch) {
  device dev;
  recording_hook hook;
  scoped_hook reg(dev, &hook);
  std::vector<int> log;
  for (int i = 0; i < 20; ++i) {
    append(dev, nullptr, &log, i);
  }
  dev.synchronize();
  auto seen = hook.take();
  ASSERT_EQ(seen.size(), 40U);
  for (std::size_t i = 2; i < seen.size(); i += 2) {
    EXPECT_EQ(seen[i].correlation_id, seen[i - 2].correlation_id + 1);
  }
  EXPECT_EQ(seen.back().correlation_id, dev.launch_count());
}

TEST(HostLaunchHooks, ExitIsCalledBeforeTheKernelCompletes) {
  device dev;
  std::vector<int> log;
  testing::stream_blocker block(dev, nullptr);
  struct exit_probe : launch_hook {
    device* dev = nullptr;
    std::vector<int>* log = nullptr;
    bool log_was_empty_at_exit = false;
    void on_enter(const launch_record&) override {}
    void on_exit(const launch_record&) override { log_was_empty_at_exit = log->empty(); }
  } probe;
  probe.dev = &dev;
  probe.log = &log;
  scoped_hook reg(dev, &probe);
  append(dev, nullptr, &log, 1);  // queued behind the blocker: cannot have run at EXIT
  EXPECT_TRUE(probe.log_was_empty_at_exit);
  block.release();
  dev.synchronize();
  EXPECT_EQ(log, std::vector<int>{1});
}

// Replays like the runtime does: on ENTER of a marked kernel, launch other work first.
class replaying_hook : public launch_hook {
 public:
  replaying_hook(device& dev, std::vector<int>* log) : dev_(dev), log_(log) {}
  void on_enter(const launch_record& rec) override {
    ++enters_;
    append(dev_, rec.on, log_, -1);  // a launch from inside the hook
    dev_.memcpy_async(&copied_, &source_, sizeof source_, rec.on);
    dev_.host_func(rec.on, [this] { log_->push_back(copied_); });
  }
  void on_exit(const launch_record&) override { ++exits_; }
  int enters() const { return enters_; }
  int exits() const { return exits_; }
  void set_source(int v) { source_ = v; }

 private:
  device& dev_;
  std::vector<int>* log_;
  int source_ = 0;
  int copied_ = 0;
  int enters_ = 0;
  int exits_ = 0;
};

TEST(HostLaunchHooks, WorkQueuedByEnterRunsBeforeTheKernel) {
  device dev;
  stream* s = dev.create_stream();
  std::vector<int> log;
  replaying_hook hook(dev, &log);
  scoped_hook reg(dev, &hook);
  hook.set_source(100);
  append(dev, s, &log, 1);
  dev.synchronize(s);
  hook.set_source(200);
  append(dev, s, &log, 2);
  dev.synchronize(s);
  EXPECT_EQ(log, (std::vector<int>{-1, 100, 1, -1, 200, 2}));
}

TEST(HostLaunchHooks, LaunchesFromInsideAHookAreNotInterceptedAgain) {
  device dev;
  std::vector<int> log;
  replaying_hook hook(dev, &log);
  recording_hook recorder;
  scoped_hook reg_replay(dev, &hook);
  scoped_hook reg_record(dev, &recorder);
  const std::uint64_t before = dev.launch_count();
  append(dev, nullptr, &log, 1);
  append(dev, nullptr, &log, 2);
  dev.synchronize();
  EXPECT_EQ(hook.enters(), 2);  // not 4: the hook's own launch did not re-enter it
  EXPECT_EQ(hook.exits(), 2);
  // The second hook sees only the two outer launches too.
  auto seen = recorder.take();
  ASSERT_EQ(seen.size(), 4U);
  // Nested launches still take correlation ids, so ids of outer launches skip them.
  EXPECT_EQ(dev.launch_count() - before, 4U);
  EXPECT_EQ(seen[2].correlation_id, seen[0].correlation_id + 2);
}

TEST(HostLaunchHooks, HooksAreCalledInRegistrationOrder) {
  device dev;
  std::vector<std::string> calls;
  struct named_hook : launch_hook {
    named_hook(std::string n, std::vector<std::string>* c) : name(std::move(n)), calls(c) {}
    std::string name;
    std::vector<std::string>* calls;
    void on_enter(const launch_record&) override { calls->push_back(name + ".enter"); }
    void on_exit(const launch_record&) override { calls->push_back(name + ".exit"); }
  };
  named_hook first("first", &calls);
  named_hook second("second", &calls);
  scoped_hook reg1(dev, &first);
  scoped_hook reg2(dev, &second);
  std::vector<int> log;
  append(dev, nullptr, &log, 0);
  dev.synchronize();
  EXPECT_EQ(calls, (std::vector<std::string>{"first.enter", "second.enter", "first.exit",
                                             "second.exit"}));
}

TEST(HostLaunchHooks, RemovedHookIsNotCalled) {
  device dev;
  recording_hook hook;
  std::vector<int> log;
  dev.add_hook(&hook);
  append(dev, nullptr, &log, 0);
  dev.remove_hook(&hook);
  append(dev, nullptr, &log, 1);
  dev.synchronize();
  EXPECT_EQ(hook.take().size(), 2U);
  EXPECT_EQ(log, (std::vector<int>{0, 1}));
}

TEST(HostLaunchHooks, AddingTwiceOrRemovingAnUnknownHookIsAConfigError) {
  device dev;
  recording_hook hook;
  EXPECT_THROW(dev.remove_hook(&hook), config_error);
  dev.add_hook(&hook);
  EXPECT_THROW(dev.add_hook(&hook), config_error);
  dev.remove_hook(&hook);
  EXPECT_THROW(dev.add_hook(nullptr), config_error);
}

TEST(HostLaunchHooks, ChangingHooksFromInsideAHookIsAConfigError) {
  device dev;
  struct meddling_hook : launch_hook {
    device* dev = nullptr;
    recording_hook other;
    bool add_threw = false;
    bool remove_threw = false;
    void on_enter(const launch_record&) override {
      try {
        dev->add_hook(&other);
      } catch (const config_error&) {
        add_threw = true;
      }
      try {
        dev->remove_hook(this);
      } catch (const config_error&) {
        remove_threw = true;
      }
    }
    void on_exit(const launch_record&) override {}
  } hook;
  hook.dev = &dev;
  scoped_hook reg(dev, &hook);
  std::vector<int> log;
  append(dev, nullptr, &log, 0);
  dev.synchronize();
  EXPECT_TRUE(hook.add_threw);
  EXPECT_TRUE(hook.remove_threw);
}

TEST(HostLaunchHooks, ExceptionFromEnterPropagatesAndNothingIsQueued) {
  device dev;
  struct throwing_hook : launch_hook {
    int exits = 0;
    void on_enter(const launch_record&) override { throw std::runtime_error("refused"); }
    void on_exit(const launch_record&) override { ++exits; }
  } hook;
  std::vector<int> log;
  {
    scoped_hook reg(dev, &hook);
    EXPECT_THROW(append(dev, nullptr, &log, 1), std::runtime_error);
  }
  append(dev, nullptr, &log, 2);  // the device still works, and the hook is gone
  dev.synchronize();
  EXPECT_EQ(log, std::vector<int>{2});
  EXPECT_EQ(hook.exits, 0);
}

TEST(HostLaunchHooks, LaunchUnpackedProducesTheSamePackedBytesAsLaunch) {
  device dev;
  recording_hook hook;
  scoped_hook reg(dev, &hook);
  std::vector<float> in(4, 1.0F);
  std::vector<float> out_packed(4);
  std::vector<float> out_unpacked(4);
  mixed_params p = make_mixed(in.data(), out_packed.data(), 4);
  dev.launch(mixed_kernel(), {}, nullptr, &p);

  const float* a_in = in.data();
  float* a_out = out_unpacked.data();
  std::int32_t a_n = 4;
  double a_scale = 2.0;
  std::uint8_t a_flag = 1;
  void* args[] = {&a_in, &a_out, &a_n, &a_scale, &a_flag};
  dev.launch_unpacked(mixed_kernel(), {}, nullptr, args);
  dev.synchronize();

  auto seen = hook.take();
  ASSERT_EQ(seen.size(), 4U);
  std::vector<std::byte> expected = bytes_of(&p, sizeof p);
  std::memcpy(expected.data() + offsetof(mixed_params, out), &a_out, sizeof a_out);
  EXPECT_EQ(seen[2].params, expected);
  EXPECT_EQ(out_packed, out_unpacked);  // and the kernel saw the same arguments
}

TEST(HostLaunchHooks, CallerMayReuseItsParameterBufferRightAfterLaunch) {
  device dev;
  std::vector<int> log;
  testing::stream_blocker block(dev, nullptr);
  testing::append_params p{&log, 1};
  dev.launch(testing::append_kernel(), {}, nullptr, &p);
  p.value = 2;  // the kernel has not run yet; it must still see 1
  dev.launch(testing::append_kernel(), {}, nullptr, &p);
  block.release();
  dev.synchronize();
  EXPECT_EQ(log, (std::vector<int>{1, 2}));
}

TEST(HostLaunchHooks, HooksRunInSynchronousModeToo) {
  device dev(device_options{.synchronous = true});
  std::vector<int> log;
  replaying_hook hook(dev, &log);
  scoped_hook reg(dev, &hook);
  hook.set_source(9);
  append(dev, nullptr, &log, 1);
  EXPECT_EQ(log, (std::vector<int>{-1, 9, 1}));
}

TEST(HostLaunchHooks, ConcurrentLaunchesGetDistinctCorrelationIds) {
  device dev;
  recording_hook hook;
  scoped_hook reg(dev, &hook);
  constexpr int threads = 4;
  constexpr int per_thread = 250;
  std::vector<std::vector<int>> logs(threads);
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
  auto seen = hook.take();
  ASSERT_EQ(seen.size(), 2U * threads * per_thread);
  std::vector<bool> used(threads * per_thread + 1, false);
  for (const auto& r : seen) {
    if (r.enter) {
      ASSERT_GE(r.correlation_id, 1U);
      ASSERT_LE(r.correlation_id, static_cast<std::uint64_t>(threads * per_thread));
      EXPECT_FALSE(used[r.correlation_id]) << "id " << r.correlation_id << " given twice";
      used[r.correlation_id] = true;
    }
  }
  for (const auto& log : logs) {
    EXPECT_EQ(log.size(), static_cast<std::size_t>(per_thread));
  }
}

TEST(HostLaunchHooks, RemoveHookWaitsForCallsInProgressOnOtherThreads) {
  device dev;
  struct slow_hook : launch_hook {
    std::latch entered{1};
    std::latch proceed{1};
    std::atomic<bool> left{false};
    void on_enter(const launch_record&) override {
      entered.count_down();
      proceed.wait();
      left.store(true);
    }
    void on_exit(const launch_record&) override {}
  } hook;
  dev.add_hook(&hook);
  std::vector<int> log;
  std::thread launcher([&] { append(dev, nullptr, &log, 1); });
  hook.entered.wait();
  std::thread remover([&] {
    dev.remove_hook(&hook);
    // Once remove_hook has returned, no call can still be inside the hook.
    EXPECT_TRUE(hook.left.load());
  });
  hook.proceed.count_down();
  remover.join();
  launcher.join();
  dev.synchronize();
  EXPECT_EQ(log, std::vector<int>{1});
}

class op_hook : public launch_hook {
 public:
  void on_enter(const launch_record&) override { ops_.push_back("launch"); }
  void on_exit(const launch_record&) override {}
  void on_memory_op(const memory_op_record& rec) override {
    ops_.push_back(rec.op == memory_op_record::kind::copy ? "copy" : "set");
    memory_.push_back(rec);
  }
  void on_event_op(const event_op_record& rec) override {
    ops_.push_back(rec.op == event_op_record::kind::record ? "record" : "wait");
    events_.push_back(rec);
  }
  std::vector<std::string> ops_;
  std::vector<memory_op_record> memory_;
  std::vector<event_op_record> events_;
};

TEST(HostLaunchHooks, CopiesSetsAndEventOperationsAreReportedInCallOrder) {
  device dev;
  stream* s = dev.create_stream();
  event* e = dev.create_event();
  op_hook hook;
  scoped_hook reg(dev, &hook);
  int a = 1;
  int b = 0;
  int c = 0;  // the set runs on another stream, unordered with the copy: its own target
  dev.memcpy_async(&b, &a, sizeof a, s);
  dev.memset_async(&c, 7, sizeof c, nullptr);
  dev.record_event(e, s);
  dev.stream_wait_event(nullptr, e);
  std::vector<int> log;
  append(dev, nullptr, &log, 0);
  dev.synchronize();
  EXPECT_EQ(hook.ops_, (std::vector<std::string>{"copy", "set", "record", "wait", "launch"}));
  ASSERT_EQ(hook.memory_.size(), 2U);
  EXPECT_EQ(hook.memory_[0].dst, &b);
  EXPECT_EQ(hook.memory_[0].src, &a);
  EXPECT_EQ(hook.memory_[0].bytes, sizeof a);
  EXPECT_EQ(hook.memory_[0].on, s);
  EXPECT_EQ(hook.memory_[1].dst, &c);
  EXPECT_EQ(hook.memory_[1].value, 7);
  EXPECT_EQ(hook.memory_[1].src, nullptr);
  EXPECT_EQ(hook.memory_[1].on, dev.default_stream());
  ASSERT_EQ(hook.events_.size(), 2U);
  EXPECT_EQ(hook.events_[0].e, e);
  EXPECT_EQ(hook.events_[0].on, s);
  EXPECT_EQ(hook.events_[1].on, dev.default_stream());
  dev.destroy_event(e);
}

TEST(HostLaunchHooks, AllocatorPoolEventsAndHostFunctionsAreNotReported) {
  device dev;
  op_hook hook;
  scoped_hook reg(dev, &hook);
  ::sublinear::device::event_handle h = dev.record(nullptr);
  dev.host_func(nullptr, [] {});
  dev.synchronize(h);
  dev.release(h);
  dev.synchronize();
  EXPECT_TRUE(hook.ops_.empty());
}

TEST(HostLaunchHooks, OperationsQueuedFromInsideAHookAreNotReported) {
  device dev;
  struct copying_hook : op_hook {
    device* dev = nullptr;
    int src = 3;
    int dst = 0;
    void on_enter(const launch_record& rec) override {
      op_hook::on_enter(rec);
      dev->memcpy_async(&dst, &src, sizeof src, rec.on);
    }
  } hook;
  hook.dev = &dev;
  scoped_hook reg(dev, &hook);
  std::vector<int> log;
  append(dev, nullptr, &log, 0);
  dev.synchronize();
  EXPECT_EQ(hook.ops_, std::vector<std::string>{"launch"});
  EXPECT_EQ(hook.dst, 3);
}

}  // namespace
}  // namespace sublinear::device::host
