// `sublinear run` as built: the program (<build>/bin/sublinear) finds the preload library
// the build produced (<build>/lib) and gives the command an environment that loads it.
// How the environment is composed is covered in tests/runtime/cli_test.cpp
// (RunEnvironment.*); this checks the installed layout and a real child.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "child_process.hpp"

namespace sublinear::testing {
namespace {

std::string cli() { return bin_dir() + "/sublinear"; }

std::string real_path(const std::string& p) {
  char resolved[PATH_MAX];
  return ::realpath(p.c_str(), resolved) != nullptr ? std::string(resolved) : p;
}

// The test environment without its own sublinear variables.
std::vector<std::string> clean_env(std::vector<std::string> set = {}) {
  std::vector<std::string> drop{"LD_PRELOAD", "CUDA_INJECTION64_PATH"};
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    if (kv.rfind("SUBLINEAR_", 0) == 0) drop.push_back(kv.substr(0, kv.find('=')));
  }
#if defined(__SANITIZE_ADDRESS__)
  const char* asan = std::getenv("ASAN_OPTIONS");
  set.push_back(std::string("ASAN_OPTIONS=") + (asan != nullptr ? std::string(asan) + ":" : "") +
                "verify_asan_link_order=0");
#endif
  return environment_with(set, drop);
}

#define REQUIRE_BUILT()                                                                                   \
  do {                                                                                                    \
    if (!readable(cli())) GTEST_SKIP() << cli() << " is not built (target sublinear_cli)";                \
    if (!readable(lib_dir() + "/libsublinear_preload.so"))                                                \
      GTEST_SKIP() << lib_dir() << "/libsublinear_preload.so is not built (target sublinear_preload)";    \
  } while (0)

TEST(RunCommand, PrintEnvNamesTheBuiltLibraryForPreloadAndInjection) {
  REQUIRE_BUILT();
  const child_result r = run_child({cli(), "run", "--budget", "1GiB", "--report", "/tmp/r.json", "--print-env", "--",
                                    "/bin/true"},
                                   clean_env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string lib = real_path(lib_dir() + "/libsublinear_preload.so");
  EXPECT_EQ(count_of(r.out, "LD_PRELOAD=" + lib + "\n"), 1u) << r.out;
  EXPECT_EQ(count_of(r.out, "CUDA_INJECTION64_PATH=" + lib + "\n"), 1u) << r.out;
  EXPECT_EQ(count_of(r.out, "SUBLINEAR_BUDGET=1GiB\n"), 1u) << r.out;
  EXPECT_EQ(count_of(r.out, "SUBLINEAR_REPORT=/tmp/r.json\n"), 1u) << r.out;
}

TEST(RunCommand, TheCommandRunsWithTheLibraryPreloadedAndItsExitStatus) {
  REQUIRE_BUILT();
  const child_result r = run_child(
      {cli(), "run", "--", "/bin/sh", "-c", "printf '%s|%s' \"$LD_PRELOAD\" \"$CUDA_INJECTION64_PATH\"; exit 3"},
      clean_env());
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const std::string lib = real_path(lib_dir() + "/libsublinear_preload.so");
  EXPECT_EQ(r.out, lib + "|" + lib);
  void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) {
    EXPECT_EQ(count_of(r.err, "no NVIDIA GPU driver on this machine"), 1u) << "the shell says it once:\n" << r.err;
  }
}

TEST(RunCommand, AMalformedSettingStopsBeforeTheCommandRuns) {
  REQUIRE_BUILT();
  const child_result r =
      run_child({cli(), "run", "--budget", "lots", "--", "/bin/sh", "-c", "echo ran"}, clean_env());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out, "") << "the command must not run";
  EXPECT_NE(r.err.find("SUBLINEAR_BUDGET"), std::string::npos) << r.err;
}

// ---- `sublinear plan` and `sublinear report` on input they must refuse ------------------------------

std::string source_root() {
  const std::string here = __FILE__;  // <root>/tests/integrations/run_command_test.cpp
  return here.substr(0, here.rfind("/tests/integrations/"));
}

// Runs the built program under timeout(1), so that a command that no longer ends fails
// the test (timeout exits 137) instead of holding it.
child_result run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), {"/usr/bin/timeout", "-s", "KILL", "120", cli()});
  return run_child(args, clean_env());
}

TEST(PlanCommand, RefusesAMappedPeakNoTraceCanHaveInsteadOfLoopingForever) {
  if (!readable(cli())) GTEST_SKIP() << cli() << " is not built (target sublinear_cli)";
  const child_result r = run_cli({"plan", "--trace", source_root() + "/tests/runtime/traces/cudnn-resnet-h200.sltrace",
                                  "--budget", "0.5x", "--mapped-peak", "18446744073709551615"});
  EXPECT_NE(r.exit_code, 137) << "killed by timeout(1): the command did not end";
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--mapped-peak"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("more than the limit of 72057594037927936 bytes"), std::string::npos) << r.err;
}

TEST(PlanCommand, RefusesATracePathThatIsNotARegularFile) {
  if (!readable(cli())) GTEST_SKIP() << cli() << " is not built (target sublinear_cli)";
  const child_result r = run_cli({"plan", "--trace", "/dev/zero", "--budget", "1GiB"});
  EXPECT_NE(r.exit_code, 137) << "killed by timeout(1): the command did not end";
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("trace file /dev/zero: not a regular file (a character device)"), std::string::npos) << r.err;
}

TEST(ReportCommand, RefusesAReportPathThatIsNotARegularFile) {
  if (!readable(cli())) GTEST_SKIP() << cli() << " is not built (target sublinear_cli)";
  const child_result r = run_cli({"report", "/dev/zero"});
  EXPECT_NE(r.exit_code, 137) << "killed by timeout(1): the command did not end";
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot read '/dev/zero': not a regular file"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sublinear::testing
