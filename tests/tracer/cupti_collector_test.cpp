// The CUPTI collector on a real GPU. Compiled everywhere; skipped with the reason when
// libcupti or a driver and device are missing (run by the GPU script on a lent machine).
//
// The test drives the driver directly (dlopen, no CUDA headers: the tests are built
// without the toolkit's include path) with a hand-written PTX kernel, so it needs no nvcc.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/cupti/cupti_collector.hpp"
#include "tracer/recorder.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace sublinear::tracer {
namespace {

#if defined(SUBLINEAR_HAVE_CUDA)

// The driver's types, as far as this test needs them (cuda.h: all are pointers or ints).
using cu_result = int;
using cu_device = int;
using cu_context = void*;
using cu_module = void*;
using cu_function = void*;
using cu_stream = void*;
using cu_ptr = unsigned long long;

struct driver {
  void* lib = nullptr;
  cu_result (*init)(unsigned) = nullptr;
  cu_result (*device_get)(cu_device*, int) = nullptr;
  cu_result (*primary_retain)(cu_context*, cu_device) = nullptr;
  cu_result (*primary_release)(cu_device) = nullptr;
  cu_result (*ctx_set_current)(cu_context) = nullptr;
  cu_result (*module_load_data)(cu_module*, const void*) = nullptr;
  cu_result (*module_unload)(cu_module) = nullptr;
  cu_result (*module_get_function)(cu_function*, cu_module, const char*) = nullptr;
  cu_result (*mem_alloc)(cu_ptr*, std::size_t) = nullptr;
  cu_result (*mem_free)(cu_ptr) = nullptr;
  cu_result (*launch_kernel)(cu_function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             cu_stream, void**, void**) = nullptr;
  cu_result (*memset_d8_async)(cu_ptr, unsigned char, std::size_t, cu_stream) = nullptr;
  cu_result (*ctx_synchronize)() = nullptr;
  cu_result (*mem_alloc_async)(cu_ptr*, std::size_t, cu_stream) = nullptr;  // optional
  cu_result (*mem_free_async)(cu_ptr, cu_stream) = nullptr;                 // optional

  std::string open() {
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return "libcuda.so.1 not found";
    std::string missing;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr) missing += std::string(" ") + name;
    };
    get(init, "cuInit");
    get(device_get, "cuDeviceGet");
    get(primary_retain, "cuDevicePrimaryCtxRetain");
    get(primary_release, "cuDevicePrimaryCtxRelease_v2");
    get(ctx_set_current, "cuCtxSetCurrent");
    get(module_load_data, "cuModuleLoadData");
    get(module_unload, "cuModuleUnload");
    get(module_get_function, "cuModuleGetFunction");
    get(mem_alloc, "cuMemAlloc_v2");
    get(mem_free, "cuMemFree_v2");
    get(launch_kernel, "cuLaunchKernel");
    get(memset_d8_async, "cuMemsetD8Async");
    get(ctx_synchronize, "cuCtxSynchronize");
    if (!missing.empty()) return "libcuda.so.1 lacks" + missing;
    mem_alloc_async = reinterpret_cast<decltype(mem_alloc_async)>(dlsym(lib, "cuMemAllocAsync"));
    mem_free_async = reinterpret_cast<decltype(mem_free_async)>(dlsym(lib, "cuMemFreeAsync"));
    return "";
  }

  // open(), then device 0 and its primary context; "" or why a GPU test must skip.
  std::string open_device(cu_device* dev, cu_context* ctx) {
    if (std::string e = open(); !e.empty()) return e;
    if (init(0) != 0 || device_get(dev, 0) != 0 || primary_retain(ctx, *dev) != 0) return "no usable CUDA device";
    return "";
  }
};

// scale(in, out, n): reads its parameters and returns (what it does is irrelevant here).
constexpr const char* ptx = R"(
.version 8.0
.target sm_75
.address_size 64
.visible .entry tracer_gpu_scale(.param .u64 in, .param .u64 out, .param .u32 n)
{
  .reg .b64 %rd<3>;
  .reg .b32 %r<2>;
  ld.param.u64 %rd1, [in];
  ld.param.u64 %rd2, [out];
  ld.param.u32 %r1, [n];
  ret;
}
)";

// The GPU tests: device 0's primary context made current, or a skip saying why not.
class CuptiCollectorOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = cupti_collector::unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << "no CUPTI collector here: " << why;
    if (const std::string e = d.open_device(&dev, &ctx); !e.empty()) GTEST_SKIP() << e;
    opened = true;
    ASSERT_EQ(d.ctx_set_current(ctx), 0);
  }
  void TearDown() override {
    if (opened) d.primary_release(dev);
  }
  driver d;
  cu_device dev = 0;
  cu_context ctx = nullptr;
  bool opened = false;
};

TEST_F(CuptiCollectorOnGpu, RecordsBothLaunchFormsAsOnePackedBlockWithDurations) {
  recorder_options o;
  o.device = "cuda";
  recorder rec(o);
  {
    cupti_collector collector(rec);
    cu_module mod = nullptr;
    ASSERT_EQ(d.module_load_data(&mod, ptx), 0);
    cu_function fn = nullptr;
    ASSERT_EQ(d.module_get_function(&fn, mod, "tracer_gpu_scale"), 0);
    cu_ptr in = 0, out = 0;
    ASSERT_EQ(d.mem_alloc(&in, 4096), 0);
    ASSERT_EQ(d.mem_alloc(&out, 4096), 0);
    // cuMemAlloc is not the caching allocator: tell the recorder about the blocks.
    rec.on_allocate(reinterpret_cast<void*>(in), 4096, nullptr, false);
    rec.on_allocate(reinterpret_cast<void*>(out), 4096, nullptr, false);

    cu_ptr in_arg = in + 64;  // interior pointer
    cu_ptr out_arg = out;
    std::uint32_t n = 1000;
    void* args[] = {&in_arg, &out_arg, &n};
    ASSERT_EQ(d.launch_kernel(fn, 2, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr), 0);
    struct {
      cu_ptr in, out;
      std::uint32_t n;
    } packed{in_arg, out_arg, n};
    std::size_t size = 20;
    void* extra[] = {reinterpret_cast<void*>(1), &packed, reinterpret_cast<void*>(2), &size, nullptr};
    ASSERT_EQ(d.launch_kernel(fn, 2, 1, 1, 128, 1, 1, 0, nullptr, nullptr, extra), 0);
    ASSERT_EQ(d.memset_d8_async(out, 0, 4096, nullptr), 0);
    ASSERT_EQ(d.ctx_synchronize(), 0);
    collector.flush();

    const trace t = rec.take();
    std::vector<const event*> launches;
    const event* set = nullptr;
    for (const event& e : t.events) {
      if (e.kind == event_kind::launch) launches.push_back(&e);
      if (e.kind == event_kind::memset) set = &e;
    }
    ASSERT_EQ(launches.size(), 2u);
    ASSERT_NE(set, nullptr);
    EXPECT_EQ(set->bytes, 4096u);
    const kernel_info& k = t.kernels.at(launches[0]->kernel);
    EXPECT_EQ(k.name, "tracer_gpu_scale");
    EXPECT_EQ(k.params, (std::vector<param_slot>{{0, 8}, {8, 8}, {16, 4}}));
    for (const event* e : launches) {
      ASSERT_EQ(e->bytes, 20u);
      EXPECT_EQ(std::memcmp(t.params(*e).data(), &packed, 20), 0);
      EXPECT_EQ(e->grid, (dims{2, 1, 1}));
      EXPECT_NE(e->flags & event_flags::timed, 0) << "no activity record joined";
    }
    rec.on_free(reinterpret_cast<void*>(in), 4096, nullptr);
    rec.on_free(reinterpret_cast<void*>(out), 4096, nullptr);
    d.mem_free(in);
    d.mem_free(out);
    d.module_unload(mod);
  }
}

// Keeps what the collector's listener saw: "enter kernel", "exit memset", ...
class listener_log final : public launch_listener {
 public:
  struct seen {
    std::string what;
    launch_description::kind kind;
    std::uint64_t handle;
    std::vector<std::byte> params;
    std::size_t bytes;
  };
  void on_enter(const launch_description& op) override { add("enter", op); }
  void on_exit(const launch_description& op) override { add("exit", op); }
  std::vector<seen> log;

 private:
  void add(const char* what, const launch_description& op) {
    log.push_back({what, op.what, op.kernel_handle, {op.params.begin(), op.params.end()}, op.bytes});
  }
};

TEST_F(CuptiCollectorOnGpu, TheListenerSeesEachLaunchAndSetAtEnterAndExitWithThePackedBlock) {
  recorder_options o;
  o.device = "cuda";
  recorder rec(o);
  listener_log seen;
  {
    cupti_options co;
    co.listener = &seen;
    cupti_collector collector(rec, co);
    cu_module mod = nullptr;
    ASSERT_EQ(d.module_load_data(&mod, ptx), 0);
    cu_function fn = nullptr;
    ASSERT_EQ(d.module_get_function(&fn, mod, "tracer_gpu_scale"), 0);
    cu_ptr buf = 0;
    ASSERT_EQ(d.mem_alloc(&buf, 4096), 0);
    std::uint32_t n = 7;
    void* args[] = {&buf, &buf, &n};
    ASSERT_EQ(d.launch_kernel(fn, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr), 0);
    ASSERT_EQ(d.memset_d8_async(buf, 0, 4096, nullptr), 0);
    ASSERT_EQ(d.ctx_synchronize(), 0);
    collector.set_listener(nullptr);
    ASSERT_EQ(d.memset_d8_async(buf, 0, 4096, nullptr), 0);  // not seen any more
    ASSERT_EQ(d.ctx_synchronize(), 0);
    d.mem_free(buf);
    d.module_unload(mod);
  }
  ASSERT_EQ(seen.log.size(), 4u);
  EXPECT_EQ(seen.log[0].what, "enter");
  EXPECT_EQ(seen.log[1].what, "exit");
  EXPECT_EQ(seen.log[2].what, "enter");
  EXPECT_EQ(seen.log[3].what, "exit");
  EXPECT_EQ(seen.log[0].kind, launch_description::kind::kernel);
  EXPECT_EQ(seen.log[2].kind, launch_description::kind::memset);
  EXPECT_EQ(seen.log[3].bytes, 4096u);
  ASSERT_EQ(seen.log[0].params.size(), 20u) << "the packed block: two pointers and a 32-bit count";
  EXPECT_EQ(seen.log[0].params, seen.log[1].params) << "ENTER and EXIT describe the same block";
  std::uint32_t packed_n = 0;
  std::memcpy(&packed_n, seen.log[0].params.data() + 16, 4);
  EXPECT_EQ(packed_n, 7u);
}

// Note [Durations only while tracing]: set_durations(false) stops the activity records,
// set_durations(true) starts them again; the runtime keeps them on only while it traces.
TEST_F(CuptiCollectorOnGpu, ActivityRecordsStopAndStartAgainWithSetDurations) {
  recorder_options o;
  o.device = "cuda";
  recorder rec(o);
  {
    cupti_collector collector(rec);
    ASSERT_TRUE(collector.durations_on()) << "on from the start, for the first traced iteration";
    cu_module mod = nullptr;
    ASSERT_EQ(d.module_load_data(&mod, ptx), 0);
    cu_function fn = nullptr;
    ASSERT_EQ(d.module_get_function(&fn, mod, "tracer_gpu_scale"), 0);
    cu_ptr buf = 0;
    ASSERT_EQ(d.mem_alloc(&buf, 4096), 0);
    rec.on_allocate(reinterpret_cast<void*>(buf), 4096, nullptr, false);
    std::uint32_t n = 1000;
    void* args[] = {&buf, &buf, &n};
    auto launch = [&] {
      ASSERT_EQ(d.launch_kernel(fn, 2, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr), 0);
      ASSERT_EQ(d.ctx_synchronize(), 0);
    };
    launch();
    collector.set_durations(false);
    EXPECT_FALSE(collector.durations_on());
    launch();
    collector.set_durations(true);
    EXPECT_TRUE(collector.durations_on());
    launch();
    collector.flush();
    const trace t = rec.take();
    std::vector<const event*> launches;
    for (const event& e : t.events)
      if (e.kind == event_kind::launch) launches.push_back(&e);
    ASSERT_EQ(launches.size(), 3u);
    EXPECT_NE(launches[0]->flags & event_flags::timed, 0) << "timed before the records were stopped";
    EXPECT_EQ(launches[1]->flags & event_flags::timed, 0) << "no record while stopped";
    EXPECT_NE(launches[2]->flags & event_flags::timed, 0) << "timed again once started";
    d.mem_free(buf);
    d.module_unload(mod);
  }
}

// Note [Phase-aware subscription]: in the steady phase the listener still sees launches and
// sets, activity records are off; in the off phase nothing reaches the collector.
TEST_F(CuptiCollectorOnGpu, SteadyKeepsLaunchesAndSetsOffSeesNothing) {
  recorder_options o;
  o.device = "cuda";
  recorder rec(o);
  listener_log seen;
  {
    cupti_options co;
    co.listener = &seen;
    cupti_collector collector(rec, co);
    EXPECT_EQ(collector.phase(), collector_phase::tracing);
    cu_ptr buf = 0;
    ASSERT_EQ(d.mem_alloc(&buf, 4096), 0);
    ASSERT_TRUE(collector.set_phase(collector_phase::steady));
    EXPECT_FALSE(collector.durations_on());
    ASSERT_EQ(d.memset_d8_async(buf, 0, 4096, nullptr), 0);
    ASSERT_EQ(d.ctx_synchronize(), 0);
    EXPECT_EQ(seen.log.size(), 2u) << "ENTER and EXIT of the set";
    ASSERT_TRUE(collector.set_phase(collector_phase::off));
    ASSERT_EQ(d.memset_d8_async(buf, 0, 4096, nullptr), 0);
    ASSERT_EQ(d.ctx_synchronize(), 0);
    EXPECT_EQ(seen.log.size(), 2u) << "no callback in the off phase";
    ASSERT_TRUE(collector.set_phase(collector_phase::tracing));
    EXPECT_TRUE(collector.durations_on());
    d.mem_free(buf);
  }
}

// Note [Stream-ordered allocation]: a cuMemAllocAsync that reached the driver is reported.
class stream_ordered_log final : public launch_listener {
 public:
  void on_enter(const launch_description&) override {}
  void on_exit(const launch_description&) override {}
  void on_stream_ordered(std::string_view call, std::size_t bytes) override {
    calls.emplace_back(std::string(call) + " " + std::to_string(bytes));
  }
  std::vector<std::string> calls;
};

TEST_F(CuptiCollectorOnGpu, StreamOrderedAllocationsReachTheListener) {
  if (d.mem_alloc_async == nullptr || d.mem_free_async == nullptr) GTEST_SKIP() << "the driver lacks cuMemAllocAsync";
  recorder_options o;
  o.device = "cuda";
  recorder rec(o);
  stream_ordered_log seen;
  {
    cupti_options co;
    co.listener = &seen;
    cupti_collector collector(rec, co);
    cu_ptr p = 0;
    ASSERT_EQ(d.mem_alloc_async(&p, 1 << 20, nullptr), 0);
    ASSERT_EQ(d.mem_free_async(p, nullptr), 0);
    ASSERT_EQ(d.ctx_synchronize(), 0);
  }
  EXPECT_EQ(seen.calls, (std::vector<std::string>{"cuMemAllocAsync 1048576", "cuMemFreeAsync 0"}));
}

// Note [Listener failure at a launch]: the engine's failure at a launch's ENTER ends the
// process (dropped, it would let the launch compute on missing bytes: a NaN loss).
class ThrowingListener final : public launch_listener {
 public:
  void on_enter(const launch_description&) override {
    throw std::runtime_error("a recipe launch was not seen in this iteration");
  }
  void on_exit(const launch_description&) override {}
};

TEST_F(CuptiCollectorOnGpu, AListenerThatFailsAtEnterStopsTheProcessSayingWhy) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: CUDA does not survive fork
  EXPECT_DEATH(
      {
        recorder_options o;
        o.device = "cuda";
        recorder rec(o);
        ThrowingListener failing;
        cupti_options co;
        co.listener = &failing;
        cupti_collector collector(rec, co);
        cu_ptr buf = 0;
        if (d.mem_alloc(&buf, 4096) != 0) std::exit(0);  // not the death looked for: the test fails
        d.memset_d8_async(buf, 0, 4096, nullptr);
        d.ctx_synchronize();
        std::exit(0);
      },
      "fatal: the runtime failed at the entry of cuMemset.*a recipe launch was not seen");
}

TEST(CuptiCollector, SaysWhyItIsUnavailableInsteadOfFailingToLoad) {
#if defined(__SANITIZE_ADDRESS__)
  // Looking for CUPTI loads the toolkit's libraries, and with them loaded GCC 12's
  // LeakSanitizer can crash in its own exit-time check ("Tracer caught signal 11") for this
  // test binary's layout. Check for leaks now, before they are loaded; the
  // exit-time check is then skipped.
  __lsan_do_leak_check();
#endif
  const std::string why = cupti_collector::unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "CUPTI and a driver are present";
  recorder rec;
  try {
    cupti_collector c(rec);
    FAIL() << "a collector was created although: " << why;
  } catch (const cupti_unavailable& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

#else

TEST(CuptiCollector, NotBuiltWithoutTheCudaToolkit) { GTEST_SKIP() << "built without the CUDA toolkit"; }

#endif

// Built everywhere: the fatal path itself (Note [Listener failure at a launch]), and the
// hook the process runtime writes its report from, run once before the abort.
TEST(LaunchEnterFailure, RunsTheFailureHookOnceBeforeStopping) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        set_launch_failure_hook([]() noexcept { std::fputs("the hook wrote its report\n", stderr); });
        fail_at_launch_enter("cuLaunchKernel", "out of memory");
      },
      "out of memory.*the hook wrote its report");
  EXPECT_EQ(set_launch_failure_hook(nullptr), nullptr) << "this process set none: the death test ran in another";
}

// Built everywhere: the fatal path itself (Note [Listener failure at a launch]).
TEST(LaunchEnterFailure, StopsTheProcessNamingTheCallTheCauseAndTheWaysOn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(fail_at_launch_enter("cuLaunchKernel", "a recipe launch was not seen in this iteration"),
               "fatal: the runtime failed at the entry of cuLaunchKernel: a recipe launch was not seen in this "
               "iteration.*would compute on bytes that are not there.*SUBLINEAR_VALIDATE=always"
               ".*SUBLINEAR_DISABLE=1");
}

}  // namespace
}  // namespace sublinear::tracer
