// The process runtime (runtime/cuda/) and the C API over it, as a program without
// a GPU meets them: creation fails with a device_error that says what to do, the C entry
// points return NULL with that reason, the status says why sublinear is inactive. The
// collector-to-engine adapter is checked on the host device. Tests that need a GPU skip
// here with the reason and run under scripts/gpu-suite.sh.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "allocator/default_allocator.hpp"
#include "device/host/device.hpp"
#include "device/host/host_vmm.hpp"
#include "runtime/engine.hpp"
#include "runtime/host/host_runtime.hpp"
#include "runtime/settings.hpp"
#include "sublinear/error.hpp"
#include "sublinear/sublinear.h"
#include "tracer/recorder.hpp"

#if defined(SUBLINEAR_HAVE_CUDA)
#include "device/cuda/driver_api.hpp"
#include "runtime/cuda/collector_adapter.hpp"
#include "runtime/cuda/cuda_replay_device.hpp"
#include "runtime/cuda/marker_inbox.hpp"
#include "runtime/cuda/process_runtime.hpp"
#endif

namespace sublinear::runtime {
namespace {

#if defined(SUBLINEAR_HAVE_CUDA)

static_assert(std::is_base_of_v<replay_device, cuda_replay_device>, "the CUDA replay device is the engine's device");
static_assert(std::is_base_of_v<tracer::launch_listener, engine_listener>, "the adapter is the collector's listener");

bool driver_present() {
  void* h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  return h != nullptr;  // kept open: the driver stays loaded for the process anyway
}

#define REQUIRE_NO_DRIVER() \
  if (driver_present()) GTEST_SKIP() << "a CUDA driver is present: this test is for machines without one"

// Keeps whatever default allocator a test installs from leaking into the next one.
class without_default_allocator {
 public:
  without_default_allocator() : previous_(allocator::set_default_allocator(nullptr)) {}
  ~without_default_allocator() { allocator::set_default_allocator(previous_); }
  without_default_allocator(const without_default_allocator&) = delete;
  without_default_allocator& operator=(const without_default_allocator&) = delete;

 private:
  allocator::caching_allocator* previous_;
};

// ---- creation without a driver ------------------------------------------------------------------

TEST(ProcessRuntimeWithoutDriver, CreationThrowsADeviceErrorSayingNoDriverAndWhatToDo) {
  REQUIRE_NO_DRIVER();
  try {
    (void)process_runtime::create(settings{});
    FAIL() << "a process runtime was created without a driver";
  } catch (const device_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no usable CUDA driver was found"), std::string::npos) << what;
    EXPECT_NE(what.find("libcuda.so.1"), std::string::npos) << "names the library it looked for: " << what;
    EXPECT_NE(what.find("without sublinear"), std::string::npos) << "says how to run without it: " << what;
  }
}

// The budget is parsed once, by the settings: a malformed one never reaches the runtime.
TEST(ProcessRuntime, AMalformedBudgetIsAConfigErrorBeforeAnyDeviceIsTouched) {
  const env_lookup lookup = [](const char* n) -> const char* {
    return std::string_view(n) == "SUBLINEAR_BUDGET" ? "lots" : nullptr;
  };
  EXPECT_THROW((void)read_settings(lookup), config_error);
}

TEST(ProcessRuntimeWithoutDriver, TheProcessInstanceIsAbsentAndRemembersWhy) {
  REQUIRE_NO_DRIVER();
  std::string first, second;
  EXPECT_EQ(process_runtime::instance(&first), nullptr);
  EXPECT_EQ(process_runtime::instance(&second), nullptr);
  EXPECT_EQ(process_runtime::existing(), nullptr);
  EXPECT_NE(first.find("no usable CUDA driver"), std::string::npos) << first;
  EXPECT_EQ(first, second);
}

// ---- the C API with nothing installed and no driver ------------------------------------------------

TEST(CApiWithoutDriver, AllocReturnsNullWithTheReasonInLastError) {
  REQUIRE_NO_DRIVER();
  without_default_allocator clean;
  EXPECT_EQ(sublinear_alloc(1024, 0, nullptr), nullptr);
  const std::string why = sublinear_last_error();
  EXPECT_NE(why.find("no usable CUDA driver was found"), std::string::npos) << why;
}

TEST(CApiWithoutDriver, StatusSaysWhySublinearIsInactive) {
  REQUIRE_NO_DRIVER();
  without_default_allocator clean;
  const std::string status = sublinear_status();
  EXPECT_EQ(status.rfind("inactive: ", 0), 0u) << status;
  EXPECT_NE(status.find("no usable CUDA driver"), std::string::npos) << status;
  EXPECT_EQ(status.find('\n'), std::string::npos) << "one line: " << status;
}

TEST(CApiWithoutDriver, WriteReportFailsWithTheReason) {
  REQUIRE_NO_DRIVER();
  without_default_allocator clean;
  EXPECT_EQ(sublinear_write_report("/tmp/sublinear-report-never-written.json"), -1);
  EXPECT_NE(std::string(sublinear_last_error()).find("no usable CUDA driver"), std::string::npos)
      << sublinear_last_error();
}

TEST(CApi, StatsBeforeAnythingIsCreatedIsAnErrorNotACreation) {
  without_default_allocator clean;
  sublinear_stats stats{};
  EXPECT_EQ(sublinear_get_stats(&stats), -1);
  EXPECT_NE(std::string(sublinear_last_error()).find("first sublinear_alloc creates it"), std::string::npos)
      << sublinear_last_error();
}

TEST(CApi, AnAllocatorTheProgramInstalledIsUsedAndReportedAsSuch) {
  without_default_allocator clean;
  device::host::device dev;
  device::host_vmm vmm{device::host_vmm_options{64 * 1024, std::size_t{64} << 20}};
  allocator::caching_allocator alloc{vmm, dev};
  const allocator::scoped_default_allocator installed(alloc);
  void* p = sublinear_alloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr) << sublinear_last_error();
  EXPECT_TRUE(alloc.find(p).has_value());
  const std::string status = sublinear_status();
  EXPECT_EQ(status.rfind("active on an allocator the program installed", 0), 0u) << status;
  EXPECT_EQ(sublinear_write_report("/tmp/sublinear-report-never-written.json"), -1) << "no runtime, no report";
  sublinear_free(p, 4096, 0, nullptr);
  EXPECT_FALSE(alloc.find(p).has_value());
}

// ---- the collector-to-engine adapter, on the host device ---------------------------------------------

TEST(CollectorAdapter, CarriesEveryFieldOfAKernelLaunch) {
  const std::byte bytes[12] = {};
  tracer::launch_description d;
  d.what = tracer::launch_description::kind::kernel;
  d.kernel_handle = 0xABCDEF;
  d.grid = {4, 5, 6};
  d.block = {32, 2, 1};
  d.shared_mem = 1024;
  d.stream = reinterpret_cast<device::stream_handle>(0x1234);
  d.params = bytes;
  const launch_view v = to_launch_view(d);
  EXPECT_EQ(v.what, launch_view::kind::kernel);
  EXPECT_EQ(v.kernel_handle, 0xABCDEFu);
  EXPECT_EQ(v.grid, d.grid);
  EXPECT_EQ(v.block, d.block);
  EXPECT_EQ(v.shared_mem, 1024u);
  EXPECT_EQ(v.stream, d.stream);
  EXPECT_EQ(v.params.data(), bytes) << "the parameter block is shared, not copied";
  EXPECT_EQ(v.params.size(), sizeof bytes);
}

TEST(CollectorAdapter, CarriesACopyAndASet) {
  int host_src = 0;
  char dst[8];
  tracer::launch_description copy;
  copy.what = tracer::launch_description::kind::memcpy;
  copy.dst = dst;
  copy.src = &host_src;
  copy.bytes = sizeof host_src;
  const launch_view c = to_launch_view(copy);
  EXPECT_EQ(c.what, launch_view::kind::memcpy);
  EXPECT_EQ(c.dst, static_cast<void*>(dst));
  EXPECT_EQ(c.src, static_cast<const void*>(&host_src));
  EXPECT_EQ(c.bytes, sizeof host_src);

  tracer::launch_description set;
  set.what = tracer::launch_description::kind::memset;
  set.dst = dst;
  set.value = 0x5A;
  set.bytes = sizeof dst;
  const launch_view s = to_launch_view(set);
  EXPECT_EQ(s.what, launch_view::kind::memset);
  EXPECT_EQ(s.value, 0x5A);
  EXPECT_EQ(s.bytes, sizeof dst);
}

// An engine on the host device whose timeline shows what reached it: every kernel EXIT
// takes a memory sample.
struct host_engine {
  device::host::device dev;
  device::host_vmm vmm{device::host_vmm_options{64 * 1024, std::size_t{64} << 20}};
  allocator::caching_allocator alloc{vmm, dev};
  host_replay_device replay{dev};
  tracer::recorder rec{tracer::recorder_options{}};
  engine eng{alloc, replay, rec, [] {
               engine_options o;
               o.record_timeline = true;
               o.config.log = log_level::error;
               return o;
             }()};
  std::size_t samples() const {
    std::size_t n = 0;
    for (const auto& e : eng.timeline()) n += e.what == timeline_event::kind::memory ? 1 : 0;
    return n;
  }
};

TEST(CollectorAdapter, AKernelExitReachesTheEngineAndRunsNoHook) {
  host_engine h;
  int hooks = 0;
  engine_listener listener(h.eng, [&] { ++hooks; });
  tracer::launch_description k;
  k.kernel_handle = 7;
  const std::size_t before = h.samples();
  listener.on_exit(k);
  EXPECT_EQ(h.samples(), before + 1) << "engine::after_launch was not reached";
  EXPECT_EQ(hooks, 0);
}

TEST(CollectorAdapter, EveryEnterRunsTheHookFirst) {
  host_engine h;
  std::vector<std::size_t> samples_at_hook;
  engine_listener listener(h.eng, [&] { samples_at_hook.push_back(h.samples()); });
  tracer::launch_description set;
  set.what = tracer::launch_description::kind::memset;
  tracer::launch_description k;
  k.kernel_handle = 7;
  listener.on_enter(set);
  listener.on_enter(k);  // the set's EXIT is the next interception: the engine samples then
  ASSERT_EQ(samples_at_hook.size(), 2u);
  EXPECT_EQ(samples_at_hook[1], samples_at_hook[0]) << "the hook ran after the engine saw the kernel";
  EXPECT_EQ(h.samples(), samples_at_hook[0] + 1) << "engine::before_launch was not reached";
}

// ---- iteration markers (marker_inbox), on the host device ----------------------------------------------

// The inbox installed as the process runtime installs it: the allocator's observer in front
// of the engine's chain, delivering to engine::mark_iteration.
struct inbox_on_host_engine {
  host_engine h;
  marker_inbox inbox{[this] { h.eng.mark_iteration(); }};
  inbox_on_host_engine() { inbox.set_next(h.alloc.set_observer(&inbox)); }
  ~inbox_on_host_engine() { h.alloc.set_observer(inbox.next()); }
  std::size_t iterations() const { return h.eng.iterations().size(); }
};

TEST(MarkerInbox, SublinearMarkIterationReachesTheEngineBeforeTheNextAllocation) {
  inbox_on_host_engine t;
  ASSERT_EQ(t.iterations(), 0u);
  sublinear_mark_iteration();
  EXPECT_EQ(t.iterations(), 0u) << "delivered at the next event, not at the call";
  void* p = t.h.alloc.allocate(4096, nullptr);
  EXPECT_EQ(t.iterations(), 1u) << "the allocation after the marker belongs to the next iteration";
  t.h.alloc.deallocate(p);
  EXPECT_EQ(t.iterations(), 1u);
}

TEST(MarkerInbox, PassesPackSlotsOnFromTheEngine) {
  // The inbox stands in front of the engine's chain: the engine's pack slots (Note [Packs])
  // must reach the allocator through it, or planned packs would get pages of their own.
  struct slot_giver final : allocator::allocation_observer {
    std::optional<allocator::pack_slot> pack_slot_for(std::size_t size, device::stream_handle) override {
      return allocator::pack_slot{3, 2 * size, 0};
    }
  } next;
  marker_inbox inbox{[] {}};
  EXPECT_FALSE(inbox.pack_slot_for(1024, nullptr).has_value()) << "no next observer";
  inbox.set_next(&next);
  const std::optional<allocator::pack_slot> slot = inbox.pack_slot_for(1024, nullptr);
  ASSERT_TRUE(slot.has_value());
  EXPECT_EQ(slot->key, 3u);
  EXPECT_EQ(slot->bytes, 2048u);
}

TEST(MarkerInbox, AFreeAlsoDeliversPendingMarkers) {
  inbox_on_host_engine t;
  void* p = t.h.alloc.allocate(4096, nullptr);
  sublinear_mark_iteration();
  sublinear_mark_iteration();
  t.h.alloc.deallocate(p);
  EXPECT_EQ(t.iterations(), 2u) << "each marker ends one iteration";
}

TEST(MarkerInbox, NothingIsDeliveredWhileTheEngineRuns) {
  inbox_on_host_engine t;
  sublinear_mark_iteration();
  {
    const marker_inbox::engine_scope inside;
    t.inbox.poll();
    EXPECT_EQ(t.iterations(), 0u);
  }
  t.inbox.poll();
  EXPECT_EQ(t.iterations(), 1u);
}

TEST(MarkerInbox, PutsThePreviousDefaultRecorderBack) {
  tracer::recorder mine;
  tracer::recorder* before = tracer::set_default_recorder(&mine);
  {
    marker_inbox inbox([] {});
    EXPECT_NE(tracer::default_recorder(), &mine);
  }
  EXPECT_EQ(tracer::default_recorder(), &mine);
  tracer::set_default_recorder(before);
}

// ---- on a GPU (scripts/gpu-suite.sh) -------------------------------------------------------------------

TEST(ProcessRuntimeOnGpu, AllocatesOnTheDeviceAndSaysSoInItsStatus) {
  if (!driver_present()) GTEST_SKIP() << "no CUDA driver (libcuda.so.1) on this machine";
  settings s;
  s.budget = policy::parse_budget("1GiB");
  s.log = log_level::error;
  std::unique_ptr<process_runtime> rt;
  try {
    rt = process_runtime::create(s);
  } catch (const device_error& e) {
    GTEST_SKIP() << "no usable CUDA device: " << e.what();
  }
  void* p = rt->allocator().allocate(std::size_t{3} << 20, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(rt->owns(p));
  EXPECT_TRUE(rt->owns(static_cast<char*>(p) + 4096)) << "interior pointers count";
  EXPECT_TRUE(rt->serves_current_device());
  EXPECT_EQ(rt->reported_total_memory(), std::size_t{1} << 30) << "an absolute budget is reported as the total";
  const std::string status = rt->status_line();
  EXPECT_EQ(status.rfind("active on cuda:", 0), 0u) << status;
  EXPECT_NE(status.find("budget 1GiB"), std::string::npos) << status;
  rt->synchronize();
  rt->allocator().deallocate(p);
  EXPECT_FALSE(rt->owns(p));
}

// fill(out, value): *out = value. PTX, so the test needs no nvcc; loaded through the driver.
constexpr const char* fill_ptx = R"(
.version 8.0
.target sm_75
.address_size 64
.visible .entry sublinear_test_fill(.param .u64 out, .param .u32 value)
{
  .reg .b64 %rd<3>;
  .reg .b32 %r<2>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [value];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r1;
  ret;
}
)";

TEST(ProcessRuntimeOnGpu, TheReplayDeviceRelaunchesAKernelASetAndACopyThroughTheDriver) {
  if (!driver_present()) GTEST_SKIP() << "no CUDA driver (libcuda.so.1) on this machine";
  std::string why;
  const device::driver_api* api = device::load_driver(&why);
  if (api == nullptr) GTEST_SKIP() << why;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr);
  using cu_result = int;
  auto retain = reinterpret_cast<cu_result (*)(void**, int)>(::dlsym(lib, "cuDevicePrimaryCtxRetain"));
  auto release = reinterpret_cast<cu_result (*)(int)>(::dlsym(lib, "cuDevicePrimaryCtxRelease_v2"));
  auto set_current = reinterpret_cast<cu_result (*)(void*)>(::dlsym(lib, "cuCtxSetCurrent"));
  auto load = reinterpret_cast<cu_result (*)(void**, const void*)>(::dlsym(lib, "cuModuleLoadData"));
  auto get_function = reinterpret_cast<cu_result (*)(void**, void*, const char*)>(::dlsym(lib, "cuModuleGetFunction"));
  auto unload = reinterpret_cast<cu_result (*)(void*)>(::dlsym(lib, "cuModuleUnload"));
  ASSERT_TRUE(retain && release && set_current && load && get_function && unload);
  void* ctx = nullptr;
  if (retain(&ctx, 0) != 0) GTEST_SKIP() << "no usable CUDA device 0";
  ASSERT_EQ(set_current(ctx), 0);
  settings s;
  s.log = log_level::error;
  s.disable = true;  // only the allocator is needed here
  std::unique_ptr<process_runtime> rt = process_runtime::create(s);
  void* module = nullptr;
  ASSERT_EQ(load(&module, fill_ptx), 0);
  void* fn = nullptr;
  ASSERT_EQ(get_function(&fn, module, "sublinear_test_fill"), 0);
  char* buf = static_cast<char*>(rt->allocator().allocate(4096, nullptr));
  ASSERT_NE(buf, nullptr);

  cuda_replay_device replay(*api, static_cast<CUctx_st*>(ctx));
  struct {
    void* out;
    std::uint32_t value;
  } packed{buf, 0xC0FFEEu};
  static_assert(sizeof packed == 16);  // the device layout: 8 + 4, padded; the driver reads 12
  launch_view k;
  k.kernel_handle = reinterpret_cast<std::uintptr_t>(fn);
  k.grid = {1, 1, 1};
  k.block = {1, 1, 1};
  k.params = {reinterpret_cast<const std::byte*>(&packed), 12};
  replay.replay(k, nullptr);
  std::uint32_t got = 0;
  replay.download(&got, buf, sizeof got, nullptr);
  EXPECT_EQ(got, 0xC0FFEEu) << "the kernel did not run with the packed block";

  launch_view set;
  set.what = launch_view::kind::memset;
  set.dst = buf + 64;
  set.value = 0x5A;
  set.bytes = 4;
  replay.replay(set, nullptr);
  replay.download(&got, buf + 64, sizeof got, nullptr);
  EXPECT_EQ(got, 0x5A5A5A5Au);

  launch_view copy;
  copy.what = launch_view::kind::memcpy;
  copy.dst = buf + 128;
  copy.src = buf;
  copy.bytes = 4;
  replay.replay(copy, nullptr);
  replay.download(&got, buf + 128, sizeof got, nullptr);
  EXPECT_EQ(got, 0xC0FFEEu);

  const std::uint32_t uploaded = 1234;
  replay.upload(buf + 256, &uploaded, sizeof uploaded, nullptr);
  replay.download(&got, buf + 256, sizeof got, nullptr);
  EXPECT_EQ(got, 1234u);

  rt->synchronize();
  rt->allocator().deallocate(buf);
  unload(module);
  release(0);
}

#else

TEST(ProcessRuntime, NotBuiltWithoutTheCudaToolkit) { GTEST_SKIP() << "built without the CUDA toolkit"; }

#endif

}  // namespace
}  // namespace sublinear::runtime
