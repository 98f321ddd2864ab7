// The files the `sublinear` commands write, as built (<build>/bin/sublinear): a write that
// fails is an error naming the file and a non-zero exit (Note [Atomic file writes]), and
// `sublinear bench` shows its progress and keeps each finished sweep's results.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include "child_process.hpp"

namespace sublinear::testing {
namespace {

namespace fs = std::filesystem;

std::string cli() { return bin_dir() + "/sublinear"; }

std::string source_root() { return SUBLINEAR_SOURCE_DIR; }  // tests/CMakeLists.txt

// A trace recorded on a GPU, kept in the repository (tests/runtime/traces/README.md).
std::string gpu_trace() { return source_root() + "/tests/runtime/traces/cudnn-resnet-h200.sltrace"; }

// The test environment without its own sublinear variables, with `set` added.
std::vector<std::string> clean_env(std::vector<std::string> set = {}) {
  std::vector<std::string> drop{"LD_PRELOAD", "CUDA_INJECTION64_PATH"};
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    if (kv.rfind("SUBLINEAR_", 0) == 0) drop.push_back(kv.substr(0, kv.find('=')));
  }
  return environment_with(set, drop);
}

bool dev_full() { return ::access("/dev/full", W_OK) == 0; }

// The device files are given through links in the test's directory: a command that
// renamed a file over its output path (as root, a device can be) replaces the link, not
// the machine's /dev/full or /dev/stdout.

// A scratch directory per test.
class CliOutputs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!readable(cli())) GTEST_SKIP() << cli() << " is not built (target sublinear_cli)";
    dir_ = fs::path(::testing::TempDir()) /
           ("cli_outputs_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A link in the test's directory to `device`.
  std::string link_to(const char* device, const char* name) {
    const fs::path link = dir_ / name;
    fs::create_symlink(device, link);
    return link.string();
  }
  // A report written by a short budgeted demo run.
  std::string make_report() {
    const std::string path = (dir_ / "run.json").string();
    const child_result r = run_child({cli(), "demo", "--model", "mlp", "--budget", "0.5x", "--iterations", "3"},
                                     clean_env({"SUBLINEAR_REPORT=" + path}));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(fs::exists(path)) << r.err;
    return path;
  }
  fs::path dir_;
};

TEST_F(CliOutputs, PlanJsonToAFullDeviceFails) {
  if (!dev_full()) GTEST_SKIP() << "no writable /dev/full here";
  const std::string full = link_to("/dev/full", "full");
  const child_result r = run_child(
      {cli(), "plan", "--trace", gpu_trace(), "--budget", "2x", "--policy", "chen", "--json", full}, clean_env());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("cannot write " + full + ": No space left on device"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_symlink(full));
}

// --json /dev/stdout: the JSON after the table, both kept (stdout here is a file).
TEST_F(CliOutputs, PlanJsonToStandardOutputFollowsTheTable) {
  const std::string out = link_to("/dev/stdout", "out");
  const child_result r =
      run_child({cli(), "plan", "--trace", gpu_trace(), "--budget", "2x", "--policy", "chen", "--json", out}, clean_env());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto table = r.out.find("sublinear plan: ");
  const auto json = r.out.find("\"granularity_bytes\"");
  EXPECT_EQ(table, 0u) << r.out;
  ASSERT_NE(json, std::string::npos) << r.out;
  EXPECT_LT(table, json);
}

TEST_F(CliOutputs, PlanJsonToAMissingDirectoryFailsBeforePlanning) {
  const std::string path = (dir_ / "missing" / "plan.json").string();
  const child_result r =
      run_child({cli(), "plan", "--trace", gpu_trace(), "--budget", "0.5x", "--json", path}, clean_env());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot write " + path), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "") << "nothing planned";
}

TEST_F(CliOutputs, ReportOutputsToAFullDeviceFailWithoutSayingTheyWereWritten) {
  if (!dev_full()) GTEST_SKIP() << "no writable /dev/full here";
  const std::string report = make_report();
  const std::string full = link_to("/dev/full", "full");
  for (const char* flag : {"--plot", "--chrome-trace", "--snapshot"}) {
    SCOPED_TRACE(flag);
    const child_result r = run_child({cli(), "report", report, flag, full}, clean_env());
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("cannot write " + full + ": No space left on device"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("wrote " + full), std::string::npos) << r.err;
    EXPECT_TRUE(fs::is_symlink(full));
  }
}

// A write that fails halfway (the file-size limit, inherited by the command) leaves the
// plot from before whole, and no temporary beside it.
TEST_F(CliOutputs, AFailedReportOutputLeavesTheEarlierFileWhole) {
  const std::string report = make_report();
  const std::string plot = (dir_ / "run.svg").string();
  child_result r = run_child({cli(), "report", report, "--plot", plot}, clean_env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string good = slurp(plot);
  ASSERT_GT(good.size(), 1024u);
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto previous = ::signal(SIGXFSZ, SIG_IGN);  // inherited: the write fails with EFBIG
  struct rlimit small = old;
  small.rlim_cur = 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  r = run_child({cli(), "report", report, "--plot", plot, "--title", "another title"}, clean_env());
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, previous);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot write " + plot + ": File too large"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(plot), good);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 2) << "run.json, run.svg";
}

TEST_F(CliOutputs, DemoFailsWhenItsReportOrFiguresCannotBeWritten) {
  if (!dev_full()) GTEST_SKIP() << "no writable /dev/full here";
  const std::string full = link_to("/dev/full", "full");
  child_result r = run_child({cli(), "demo", "--model", "mlp", "--budget", "0.5x", "--iterations", "3"},
                             clean_env({"SUBLINEAR_REPORT=" + full}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("SUBLINEAR_REPORT: cannot write " + full + ": No space left on device"), std::string::npos)
      << r.err;
  r = run_child({cli(), "demo", "--model", "mlp", "--iterations", "2", "--json", full}, clean_env());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot write " + full + ": No space left on device"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("figures written to"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_symlink(full));
}

// The numbers after each `"key": ` in `json`, in order, from `from` on.
std::vector<double> numbers_after(const std::string& json, const std::string& key, std::size_t from = 0) {
  std::vector<double> out;
  const std::string needle = "\"" + key + "\": ";
  for (std::size_t at = json.find(needle, from); at != std::string::npos; at = json.find(needle, at + 1))
    out.push_back(std::stod(json.substr(at + needle.size())));
  return out;
}

// The demo's iteration time is the steady iterations' median; the validating iteration,
// which hashes every regenerated buffer, is its own figure.
TEST_F(CliOutputs, DemoIterationTimeIsTheMedianOfTheSteadyIterationsAlone) {
  const std::string path = (dir_ / "demo.json").string();
  const child_result r =
      run_child({cli(), "demo", "--model", "lstm", "--budget", "0.5x", "--policy", "chain", "--iterations", "6",
                 "--json", path},
                clean_env({"SUBLINEAR_TRACE_ITERATIONS=2", "SUBLINEAR_VALIDATE=first"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string j = slurp(path);
  ASSERT_NE(j.find("\"plan_error\": \"\""), std::string::npos) << "the demo must plan:\n" << j;
  const auto rows = j.find("\"per_iteration\"");
  ASSERT_NE(rows, std::string::npos) << j;
  // Iterations 1-2 traced, 3 validating, 4-6 steady.
  const std::vector<double> each = numbers_after(j, "sublinear_iter_s", rows);
  ASSERT_EQ(each.size(), 6u) << j;
  std::vector<double> steady(each.begin() + 3, each.end());
  std::sort(steady.begin(), steady.end());
  const std::vector<double> iter_s = numbers_after(j, "iter_s"), validate_s = numbers_after(j, "validate_iter_s");
  ASSERT_EQ(iter_s.size(), 1u) << j;
  ASSERT_EQ(validate_s.size(), 1u) << j;
  EXPECT_NEAR(iter_s[0], steady[1], 1e-6 * steady[1]) << j;
  EXPECT_NEAR(validate_s[0], each[2], 1e-6 * each[2]) << j;
  EXPECT_NE(r.out.find("iteration time (steady, median)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("validating iteration (median)"), std::string::npos) << r.out;
}

TEST_F(CliOutputs, PlanTakesAllInAListOfPlannersOnce) {
  const child_result r =
      run_child({cli(), "plan", "--trace", gpu_trace(), "--budget", "2x", "--policy", "all,all,none"}, clean_env());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("is not a planner"), std::string::npos) << r.err;
  EXPECT_EQ(count_of(r.out, "\n  none "), 1u) << r.out;
  EXPECT_EQ(count_of(r.out, "\n  greedy "), 1u) << r.out;
  const child_result bad = run_child({cli(), "plan", "--trace", gpu_trace(), "--budget", "2x", "--policy", "chen,magic"},
                                     clean_env());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--policy 'magic' is not a planner"), std::string::npos) << bad.err;
}

// `sublinear bench`: progress with a count and the time left on stderr; each sweep's
// results written as it finishes, before the next starts.
TEST_F(CliOutputs, BenchShowsProgressAndWritesEachSweepAsItFinishes) {
  const std::string json = (dir_ / "bench.json").string();
  const std::string csv = (dir_ / "bench.csv").string();
  const child_result r = run_child({cli(), "bench", "--sweep", "lstm,depth", "--lengths", "32", "--depths", "20",
                                    "--planner", "chen", "--iterations", "1", "--repeats", "1", "--json", json, "--csv",
                                    csv},
                                   clean_env());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("[0/2 points, about "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" left] depth resnet-20: probing"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[1/2 points, about "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" left] lstm"), std::string::npos) << r.err;
  const std::string written = "written (sweeps so far): JSON " + json + ", CSV " + csv;
  EXPECT_EQ(count_of(r.out, written), 2u) << r.out;
  const auto first_written = r.out.find(written);
  const auto lstm_table = r.out.find("== lstm:");
  ASSERT_NE(lstm_table, std::string::npos) << r.out;
  EXPECT_LT(first_written, lstm_table) << "the depth sweep's results are written before the lstm sweep runs";
  const std::string j = slurp(json);
  EXPECT_NE(j.find("\"id\": \"lstm\""), std::string::npos);
  EXPECT_NE(j.find("\"id\": \"depth\""), std::string::npos);
  EXPECT_NE(slurp(csv).find("\nlstm,"), std::string::npos);
}

// A write that fails after the first sweep stops the run with an error naming the file.
TEST_F(CliOutputs, BenchFailsAtOnceWhenItsResultsCannotBeWritten) {
  if (!dev_full()) GTEST_SKIP() << "no writable /dev/full here";
  const std::string full = link_to("/dev/full", "full");
  const child_result r = run_child({cli(), "bench", "--sweep", "lstm,depth", "--lengths", "32", "--depths", "20",
                                    "--planner", "chen", "--iterations", "1", "--repeats", "1", "--json", full},
                                   clean_env());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("cannot write " + full + ": No space left on device"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_symlink(full));
  EXPECT_NE(r.out.find("== depth:"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("== lstm:"), std::string::npos) << "no sweep runs after a failed write";
}

TEST_F(CliOutputs, BenchHelpStatesHowLongARunTakes) {
  const child_result r = run_child({cli(), "bench", "--help"}, clean_env());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("a default run (all sweeps) took 35 min"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("`--quick` took 6 min 18 s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a default run there is estimated at\nabout "), std::string::npos) << r.out;
}

}  // namespace
}  // namespace sublinear::testing
