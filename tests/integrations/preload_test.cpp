// libsublinear_preload.so as a program meets it: loaded with LD_PRELOAD into another
// process, on a machine without a driver (these machines), where it must let the program
// run unchanged and say once that sublinear is inactive; its cudaMalloc must answer as
// libcudart does. The library is found in <build>/lib next to this test's <build>/bin.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "child_process.hpp"

namespace sublinear::testing {
namespace {

const std::string kNoDriverLine = "no NVIDIA GPU driver on this machine";
const std::string kInactive = "sublinear is inactive in this process and CUDA calls pass through unchanged";

std::string preload_library() { return lib_dir() + "/libsublinear_preload.so"; }

bool driver_present() {
  void* h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == nullptr) h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  return h != nullptr;  // kept open: the driver stays loaded for the process anyway
}

// The environment for a child that preloads the library. A sanitizer runtime pulled in
// by the (instrumented) library is not first in the child's link order; ASan accepts that
// when told.
std::vector<std::string> preload_env(std::vector<std::string> set, const std::vector<std::string>& unset = {}) {
  set.push_back("LD_PRELOAD=" + preload_library());
#if defined(__SANITIZE_ADDRESS__)
  const char* asan = std::getenv("ASAN_OPTIONS");
  set.push_back(std::string("ASAN_OPTIONS=") + (asan != nullptr ? std::string(asan) + ":" : "") +
                "verify_asan_link_order=0");
#endif
  std::vector<std::string> drop = unset;
  // The test environment's own settings must not leak into the child's.
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    if (kv.rfind("SUBLINEAR_", 0) == 0) drop.push_back(kv.substr(0, kv.find('=')));
  }
  drop.push_back("CUDA_INJECTION64_PATH");
  return environment_with(set, drop);
}

#define REQUIRE_PRELOAD_WITHOUT_DRIVER()                                                          \
  do {                                                                                            \
    if (!readable(preload_library()))                                                             \
      GTEST_SKIP() << preload_library() << " is not built (target sublinear_preload)";            \
    if (driver_present()) GTEST_SKIP() << "a CUDA driver is present: this test is for machines without one"; \
  } while (0)

TEST(PreloadWithoutDriver, TheProgramRunsAndSublinearSaysOnceThatItIsInactive) {
  REQUIRE_PRELOAD_WITHOUT_DRIVER();
  const child_result r = run_child({"/bin/true"}, preload_env({}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.err, kNoDriverLine), 1u) << r.err;
  EXPECT_EQ(count_of(r.err, kInactive), 1u) << r.err;
  EXPECT_EQ(count_of(r.err, "\n"), 1u) << "one line, nothing else:\n" << r.err;
}

TEST(PreloadWithoutDriver, TheProgramsOutputAndExitStatusPassThrough) {
  REQUIRE_PRELOAD_WITHOUT_DRIVER();
  const child_result r = run_child({"/bin/sh", "-c", "printf 'hello'; exit 7"}, preload_env({}));
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(r.out, "hello");
}

TEST(PreloadWithoutDriver, SublinearDisableSilencesIt) {
  REQUIRE_PRELOAD_WITHOUT_DRIVER();
  const child_result r = run_child({"/bin/true"}, preload_env({"SUBLINEAR_DISABLE=1"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

TEST(PreloadWithoutDriver, AMalformedSettingMakesItInactiveNamingTheSetting) {
  if (!readable(preload_library())) GTEST_SKIP() << preload_library() << " is not built (target sublinear_preload)";
  const child_result r = run_child({"/bin/true"}, preload_env({"SUBLINEAR_BUDGET=lots"}));
  EXPECT_EQ(r.exit_code, 0) << "a bad setting must not stop the program";
  EXPECT_NE(r.err.find("SUBLINEAR_BUDGET"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lots"), std::string::npos) << r.err;
  EXPECT_EQ(count_of(r.err, kInactive), 1u) << r.err;
}

// ---- cudaMalloc through the preload, compared with libcudart's own answer ---------------------------

// The child half: runs only inside the child the next test starts (this same binary with
// the library preloaded). Prints "RESULT <libcudart's cudaMalloc> <the one a program calls>
// <whether that one is the preload's> <libcudart's cudaFree(nullptr)> <the one a program calls>
// <libcudart's cudaMemGetInfo> <the one a program calls>".
constexpr const char* kChildVariable = "SLTEST_PRELOAD_CHILD";

using cuda_malloc_fn = int (*)(void**, std::size_t);
using cuda_free_fn = int (*)(void*);

std::string cudart_path() {
  for (const char* p : {"/usr/local/cuda/lib64/libcudart.so", "/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so"})
    if (readable(p)) return p;
  return "";
}

TEST(PreloadChild, CallsCudaMallocBothWays) {
  if (std::getenv(kChildVariable) == nullptr) GTEST_SKIP() << "runs inside PreloadWithoutDriver's child only";
  void* cudart = ::dlopen(cudart_path().c_str(), RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(cudart, nullptr) << ::dlerror();
  auto real_malloc = reinterpret_cast<cuda_malloc_fn>(::dlsym(cudart, "cudaMalloc"));
  auto real_free = reinterpret_cast<cuda_free_fn>(::dlsym(cudart, "cudaFree"));
  // What a program linked against libcudart calls: the first definition in load order.
  auto malloc_seen = reinterpret_cast<cuda_malloc_fn>(::dlsym(RTLD_DEFAULT, "cudaMalloc"));
  auto free_seen = reinterpret_cast<cuda_free_fn>(::dlsym(RTLD_DEFAULT, "cudaFree"));
  ASSERT_TRUE(real_malloc && real_free && malloc_seen && free_seen);
  Dl_info info{};
  ASSERT_NE(::dladdr(reinterpret_cast<void*>(malloc_seen), &info), 0);
  const bool interposed = info.dli_fname != nullptr && std::strstr(info.dli_fname, "libsublinear_preload") != nullptr;
  void* p = nullptr;
  const int real_result = real_malloc(&p, 1 << 20);
  void* q = nullptr;
  const int seen_result = malloc_seen(&q, 1 << 20);
  using mem_get_info_fn = int (*)(std::size_t*, std::size_t*);
  auto real_info = reinterpret_cast<mem_get_info_fn>(::dlsym(cudart, "cudaMemGetInfo"));
  auto info_seen = reinterpret_cast<mem_get_info_fn>(::dlsym(RTLD_DEFAULT, "cudaMemGetInfo"));
  ASSERT_TRUE(real_info && info_seen);
  std::size_t free_bytes = 0, total_bytes = 0;
  std::printf("RESULT %d %d %d %d %d %d %d\n", real_result, seen_result, interposed ? 1 : 0, real_free(nullptr),
              free_seen(nullptr), real_info(&free_bytes, &total_bytes), info_seen(&free_bytes, &total_bytes));
}

TEST(PreloadWithoutDriver, CudaMallocFreeAndMemGetInfoReturnWhatLibcudartReturns) {
  REQUIRE_PRELOAD_WITHOUT_DRIVER();
  if (cudart_path().empty()) GTEST_SKIP() << "libcudart.so not found under /usr/local/cuda";
  const child_result r = run_child({"/proc/self/exe", "--gtest_filter=PreloadChild.CallsCudaMallocBothWays"},
                                   preload_env({std::string(kChildVariable) + "=1"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  int real_result = -1, seen_result = -1, interposed = -1, real_free = -1, seen_free = -1, real_info = -1,
      seen_info = -1;
  const auto at = r.out.find("RESULT ");
  ASSERT_NE(at, std::string::npos) << r.out << r.err;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at, "RESULT %d %d %d %d %d %d %d", &real_result, &seen_result, &interposed,
                        &real_free, &seen_free, &real_info, &seen_info),
            7)
      << r.out;
  EXPECT_EQ(interposed, 1) << "cudaMalloc does not resolve to the preload library:\n" << r.out;
  EXPECT_NE(real_result, 0) << "libcudart allocated without a driver?";
  EXPECT_EQ(seen_result, real_result) << "the interposed cudaMalloc must answer as libcudart does without a driver";
  EXPECT_EQ(seen_free, real_free) << "cudaFree(nullptr) too";
  EXPECT_EQ(seen_info, real_info) << "and cudaMemGetInfo";
  EXPECT_EQ(count_of(r.err, kNoDriverLine), 1u) << r.err;
}

// ---- what the library exports --------------------------------------------------------------------

TEST(PreloadLibrary, ExportsTheInterposedEntryPointsAndTheInjectionEntryPoint) {
  if (!readable(preload_library())) GTEST_SKIP() << preload_library() << " is not built (target sublinear_preload)";
  // RTLD_LOCAL: its definitions must not replace anything in this process.
  void* h = ::dlopen(preload_library().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << ::dlerror();
  for (const char* name : {"cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cudaMemGetInfo",
                           "cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync", "cuMemFreeAsync", "cuMemGetInfo_v2",
                           "InitializeInjection", "sublinear_alloc", "sublinear_status", "sublinear_write_report"}) {
    EXPECT_NE(::dlsym(h, name), nullptr) << name << " is not exported";
  }
}

TEST(PreloadLibrary, InitializeInjectionWithoutADriverLetsTheProcessGoOn) {
  if (!readable(preload_library())) GTEST_SKIP() << preload_library() << " is not built (target sublinear_preload)";
  if (driver_present()) GTEST_SKIP() << "a CUDA driver is present: calling InitializeInjection outside cuInit is wrong there";
  void* h = ::dlopen(preload_library().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << ::dlerror();
  auto init = reinterpret_cast<int (*)()>(::dlsym(h, "InitializeInjection"));
  auto active = reinterpret_cast<int (*)()>(::dlsym(h, "sublinear_cupti_injection_active"));
  auto status = reinterpret_cast<const char* (*)()>(::dlsym(h, "sublinear_status"));
  ASSERT_TRUE(init && active && status);
  EXPECT_EQ(init(), 1) << "the driver treats 0 as a failed injection";
  EXPECT_EQ(active(), 1);
  EXPECT_EQ(init(), 1) << "a second call is tolerated";
  EXPECT_NE(std::string(status()).find("inactive: "), std::string::npos) << status();
}

}  // namespace
}  // namespace sublinear::testing
