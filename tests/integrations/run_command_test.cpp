// `sublinear run` as built: the program (<build>/bin/sublinear) finds the preload library
// the build produced (<build>/lib) and gives the command an environment that loads it.
// How the environment is composed is covered in tests/runtime/cli_test.cpp
// (RunEnvironment.*); this checks the installed layout and a real child.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

// Note [Preload library check]: ld.so would skip these with one "ignored" line and run the
// command without sublinear.
TEST(RunCommand, AFileThatIsNoLibraryIsRefusedBeforeTheCommandRuns) {
  REQUIRE_BUILT();
  const child_result r =
      run_child({cli(), "run", "--library", "/etc/passwd", "--", "/bin/sh", "-c", "echo ran"}, clean_env());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.out, "") << "the command must not run";
  EXPECT_NE(r.err.find("'/etc/passwd' is not a shared library"), std::string::npos) << r.err;
}

TEST(RunCommand, ALibraryThatIsNotSublinearsPreloadLibraryIsRefused) {
  REQUIRE_BUILT();
  const std::string other = lib_dir() + "/libsublinear.so";  // a shared library, but the C API only
  if (!readable(other)) GTEST_SKIP() << other << " is not built";
  const child_result r = run_child({cli(), "run", "--library", other, "--print-env", "--", "/bin/true"}, clean_env());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("not sublinear's preload library"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sublinear_preload_version"), std::string::npos) << r.err;
}

TEST(RunCommand, TheBuiltPreloadLibraryPassesTheCheckWhenNamed) {
  REQUIRE_BUILT();
  const child_result r = run_child(
      {cli(), "run", "--library", lib_dir() + "/libsublinear_preload.so", "--print-env", "--", "/bin/true"}, clean_env());
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(RunCommand, PyTorchsCachingAllocatorIsTurnedOffForTheCommandUnlessSet) {
  REQUIRE_BUILT();
  child_result r = run_child({cli(), "run", "--", "/bin/sh", "-c", "printf %s \"$PYTORCH_NO_CUDA_MEMORY_CACHING\""},
                             clean_env({}));
  EXPECT_EQ(r.out, "1") << r.err;
  r = run_child({cli(), "run", "--", "/bin/sh", "-c", "printf %s \"$PYTORCH_NO_CUDA_MEMORY_CACHING\""},
                clean_env({"PYTORCH_NO_CUDA_MEMORY_CACHING=0"}));
  EXPECT_EQ(r.out, "0") << r.err;
}

// Note [Run supervision].
TEST(RunCommand, ACommandThatNeverLoadsTheLibraryFailsAndSaysSo) {
  REQUIRE_BUILT();
  const std::string static_program = bin_dir() + "/sublinear_test_static_exit";
  if (!readable(static_program)) GTEST_SKIP() << static_program << " is not built (no static libc)";
  const child_result r = run_child({cli(), "run", "--", static_program, "0"}, clean_env());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("ran without sublinear"), std::string::npos) << r.err;
  // Its own failure is kept.
  EXPECT_EQ(run_child({cli(), "run", "--", static_program, "5"}, clean_env()).exit_code, 5);
}

TEST(RunCommand, ACommandThatLoadedTheLibraryIsNotToldOtherwise) {
  REQUIRE_BUILT();
  const child_result r = run_child({cli(), "run", "--", "/bin/true"}, clean_env());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("ran without sublinear"), std::string::npos) << r.err;
}

TEST(RunCommand, AStaleLoadedPipeVariableInTheEnvironmentIsReplaced) {
  REQUIRE_BUILT();
  const child_result r = run_child({cli(), "run", "--", "/bin/true"}, clean_env({"_SUBLINEAR_RUN_FD=999"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("ran without sublinear"), std::string::npos) << r.err;
}

TEST(RunCommand, ACommandKilledByASignalEndsTheRunWithTheSameSignal) {
  REQUIRE_BUILT();
  const child_result r = run_child({cli(), "run", "--", "/bin/sh", "-c", "kill -TERM $$"}, clean_env());
  EXPECT_EQ(r.signal, SIGTERM) << "exit " << r.exit_code << "\n" << r.err;
}

// `sublinear run -- /bin/sh -c SCRIPT` started in the background; SCRIPT writes the
// shell's pid to `pid_file` first. Returns the run's pid and, once written, the shell's.
struct background_run {
  pid_t run = -1;
  pid_t command = -1;
};

background_run start_in_background(const std::string& script, const std::string& pid_file) {
  background_run b;
  ::unlink(pid_file.c_str());
  const std::vector<std::string> argv{cli(), "run", "--", "/bin/sh", "-c", "echo $$ > " + pid_file + "; " + script};
  const std::vector<std::string> env = clean_env();
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  if (::posix_spawn(&b.run, args[0], nullptr, nullptr, args.data(), envp.data()) != 0) return b;
  // Bounded: the shell writes its pid at once (30 s at most, then the test fails).
  for (int i = 0; i < 3000 && b.command <= 0; ++i) {
    const std::string text = slurp(pid_file);
    if (!text.empty() && text.back() == '\n') b.command = static_cast<pid_t>(std::stol(text));
    if (b.command <= 0) ::usleep(10000);
  }
  return b;
}

// Whether `pid` has ended (gone, or a zombie nobody has reaped yet).
bool ended(pid_t pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return true;
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

TEST(RunCommand, ATermSentToTheRunReachesTheCommand) {
  REQUIRE_BUILT();
  const std::string pid_file = ::testing::TempDir() + "run-term.pid";
  const background_run b = start_in_background("trap 'exit 7' TERM; while :; do sleep 0.05; done", pid_file);
  ASSERT_GT(b.run, 0);
  ASSERT_GT(b.command, 0) << "the command never started";
  ::kill(b.run, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(b.run, &status, 0), b.run);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7) << "the command's trap decides the exit status";
}

TEST(RunCommand, KillingTheRunKillsTheCommand) {
  REQUIRE_BUILT();
  const std::string pid_file = ::testing::TempDir() + "run-kill.pid";
  const background_run b = start_in_background("while :; do sleep 0.05; done", pid_file);
  ASSERT_GT(b.run, 0);
  ASSERT_GT(b.command, 0) << "the command never started";
  ::kill(b.run, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(b.run, &status, 0), b.run);
  // PR_SET_PDEATHSIG delivers SIGKILL to the command; wait (bounded) for it to end.
  bool gone = false;
  for (int i = 0; i < 3000 && !gone; ++i) {
    gone = ended(b.command);
    if (!gone) ::usleep(10000);
  }
  if (!gone) ::kill(b.command, SIGKILL);  // leave nothing behind
  EXPECT_TRUE(gone) << "the command outlived `sublinear run`";
}

TEST(RunCommand, ACommandThatDoesNotExistIsReportedAs127) {
  REQUIRE_BUILT();
  const child_result r = run_child({cli(), "run", "--", "/nonexistent/program"}, clean_env());
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("cannot run '/nonexistent/program'"), std::string::npos) << r.err;
}

// Note [Log file check]: a SUBLINEAR_LOG path the runtime could not open stops the run
// before the command starts, with the config errors' exit status.
TEST(RunCommand, ALogPathInAMissingDirectoryStopsBeforeTheCommandRuns) {
  REQUIRE_BUILT();
  const std::string dir = ::testing::TempDir() + "/sublinear-no-such-dir-" + std::to_string(::getpid());
  const std::string path = dir + "/run.log";
  const child_result r =
      run_child({cli(), "run", "--log", "info:" + path, "--", "/bin/sh", "-c", "echo ran"}, clean_env());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.out, "") << "the command must not run";
  EXPECT_NE(r.err.find("SUBLINEAR_LOG: cannot open the log file " + path), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("its directory " + dir + " does not exist"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mkdir -p " + dir), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("leave out ':PATH'"), std::string::npos) << r.err;
}

TEST(RunCommand, ALogPathThatIsADirectoryOrUnwritableStopsBeforeTheCommandRuns) {
  REQUIRE_BUILT();
  const std::string dir = ::testing::TempDir() + "/sublinear-log-dir-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0) << dir;
  child_result r = run_child({cli(), "run", "--", "/bin/sh", "-c", "echo ran"}, clean_env({"SUBLINEAR_LOG=info:" + dir}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.out, "") << "the command must not run";
  EXPECT_NE(r.err.find("cannot open the log file " + dir + " for appending: it is a directory"), std::string::npos)
      << r.err;
  if (::geteuid() != 0) {  // root writes anywhere
    ASSERT_EQ(::chmod(dir.c_str(), 0500), 0);
    r = run_child({cli(), "run", "--log", "info:" + dir + "/run.log", "--", "/bin/sh", "-c", "echo ran"}, clean_env());
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.out, "") << "the command must not run";
    EXPECT_NE(r.err.find("its directory " + dir + " is not writable"), std::string::npos) << r.err;
    ::chmod(dir.c_str(), 0700);
  }
  ::rmdir(dir.c_str());
}

TEST(RunCommand, AWritableLogPathLetsTheCommandRunAndTheCheckLeavesNoFile) {
  REQUIRE_BUILT();
  const std::string path = ::testing::TempDir() + "/sublinear-run-" + std::to_string(::getpid()) + ".log";
  ::unlink(path.c_str());
  const child_result r =
      run_child({cli(), "run", "--log", "warn:" + path, "--", "/bin/sh", "-c", "echo ran; exit 3"}, clean_env());
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, "ran\n");
  EXPECT_EQ(r.err.find("SUBLINEAR_LOG"), std::string::npos) << r.err;
  // The shell never starts the engine, so only the check could have made the file.
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << path << " was left behind";
  ::unlink(path.c_str());
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
