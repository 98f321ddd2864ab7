// `sublinear plan` with offload (--offload, --link-bandwidth, --host-budget), as built:
// each buffer's action, the bytes over the link, link busy time and stalls; bad values
// are errors that name the problem and the fix.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "child_process.hpp"

namespace sublinear::testing {
namespace {

std::string cli() { return bin_dir() + "/sublinear"; }
std::string gpu_trace() { return std::string(SUBLINEAR_SOURCE_DIR) + "/tests/runtime/traces/cudnn-resnet-h200.sltrace"; }

std::vector<std::string> clean_env() {
  std::vector<std::string> drop{"LD_PRELOAD", "CUDA_INJECTION64_PATH"};
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    if (kv.rfind("SUBLINEAR_", 0) == 0) drop.push_back(kv.substr(0, kv.find('=')));
  }
  return environment_with({}, drop);
}

child_result plan(std::vector<std::string> extra) {
  std::vector<std::string> argv{cli(), "plan", "--trace", gpu_trace(), "--budget", "0.5x"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_child(argv, clean_env());
}

class PlanOffload : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!readable(cli())) GTEST_SKIP() << cli() << " is not built (target sublinear_cli)";
  }
};

TEST_F(PlanOffload, OnlyListsEachOffloadAndNoRecompute) {
  const child_result r = plan({"--policy", "chain,greedy", "--offload", "only", "--link-bandwidth", "50", "--evictions"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("offload: only (no recompute), link 50 GB/s to host, 50 GB/s to the device"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("offload floor:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("link busy"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("does not offload"), std::string::npos) << r.out;  // chain
  EXPECT_NE(r.out.find("greedy: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" offloads (copied to host memory and back;"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pages released before launch"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("replays "), std::string::npos) << r.out;  // nothing recomputed
}

TEST_F(PlanOffload, TheLatencyPerCopyIsPartOfTheLink) {
  const std::string path = ::testing::TempDir() + "/plan_latency_" + std::to_string(::getpid()) + ".json";
  const child_result r = plan({"--policy", "greedy", "--link-bandwidth", "50", "--link-latency", "4.5,0.5", "--json", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string json = slurp(path);
  std::remove(path.c_str());
  EXPECT_NE(r.out.find("50 GB/s to the device, 4.50 ms and 500.0 us per copy"), std::string::npos) << r.out;
  EXPECT_NE(json.find("\"to_host_latency_s\": 0.0045"), std::string::npos) << json;
  EXPECT_NE(json.find("\"to_device_latency_s\": 5e-04"), std::string::npos) << json;
}

TEST_F(PlanOffload, WithoutALinkNothingIsOffloadedAndTheOutputSaysHowToPreviewIt) {
  const child_result r = plan({"--policy", "greedy"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("offload: not previewed, a trace does not record the device-host link: --link-bandwidth"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("offload floor"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("link busy"), std::string::npos) << r.out;
  // Offload turned off: nothing to preview, nothing said.
  const child_result off = plan({"--policy", "greedy", "--offload", "off"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(off.out.find("offload"), std::string::npos) << off.out;
}

// The plan does not depend on the planning threads (Note [Parallel offload starts]).
TEST_F(PlanOffload, OneThreadAndThreePlanTheSame) {
  std::string json[2];
  for (int k = 0; k < 2; ++k) {
    const std::string path =
        ::testing::TempDir() + "/plan_threads_" + std::to_string(k) + "_" + std::to_string(::getpid()) + ".json";
    const child_result r = plan({"--policy", "greedy,reforward", "--link-bandwidth", "50", "--evictions", "--threads",
                                 k == 0 ? "1" : "3", "--json", path});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json[k] = slurp(path);
    std::remove(path.c_str());
    // Planning time is the one figure that differs.
    for (std::size_t at = json[k].find("\"planning_s\": "); at != std::string::npos;
         at = json[k].find("\"planning_s\": ", at + 1)) {
      const std::size_t end = json[k].find_first_of(",\n}", at + 14);
      json[k].erase(at + 14, end - (at + 14));
    }
  }
  EXPECT_NE(json[0].find("\"offloaded_bytes\""), std::string::npos) << json[0];
  EXPECT_EQ(json[0], json[1]);
}

TEST_F(PlanOffload, JsonHasTheLinkFigures) {
  const std::string path = ::testing::TempDir() + "/plan_offload_" + std::to_string(::getpid()) + ".json";
  const child_result r = plan({"--policy", "greedy", "--link-bandwidth", "50,45", "--host-budget", "64MiB",
                               "--fetch-margin", "0.5", "--json", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string json = slurp(path);
  std::remove(path.c_str());
  EXPECT_NE(json.find("\"mode\": \"auto\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"to_device_bytes_per_s\": 45000000000"), std::string::npos) << json;
  EXPECT_NE(json.find("\"host_budget_bytes\": 67108864"), std::string::npos) << json;
  EXPECT_NE(json.find("\"fetch_margin\": 0.5"), std::string::npos) << json;
  EXPECT_NE(json.find("\"offloaded_bytes\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"predicted_stall_s\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"link_busy_s\""), std::string::npos) << json;
}

TEST_F(PlanOffload, BadValuesNameTheProblemAndTheFix) {
  const struct {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"--offload", "maybe"}, "--offload must be auto, off or only, got 'maybe'"},
      {{"--offload", "only"}, "--offload only needs --link-bandwidth GB/s"},
      {{"--offload", "auto"}, "give --link-bandwidth GB/s"},
      {{"--link-bandwidth", "0"}, "--link-bandwidth needs GB/s as a positive number"},
      {{"--link-bandwidth", "32,"}, "for example 32 or 50,45; got '32,'"},
      {{"--link-bandwidth", "1e3"}, "got '1e3'"},
      {{"--link-bandwidth", "5", "--host-budget", "10%"}, "--host-budget needs bytes"},
      {{"--link-bandwidth", "5", "--link-latency", "-1"}, "--link-latency needs milliseconds per copy, 0 or more"},
      {{"--link-bandwidth", "5", "--link-latency", "4,x"}, "for example 0.01 or 4.5,4; got '4,x'"},
      {{"--link-latency", "4.5"}, "--link-latency needs --link-bandwidth GB/s too"},
      {{"--link-bandwidth", "5", "--threads", "0"}, "--threads='0' is not valid; accepted: a whole number from 1 to 64"},
      {{"--link-bandwidth", "5", "--threads", "2x"}, "--threads='2x' is not valid; accepted: a whole number from 1 to 64"},
      {{"--link-bandwidth", "5", "--fetch-margin", "-1"}, "--fetch-margin='-1' is not valid; accepted: a number from 0 to 4"},
  };
  for (const auto& c : cases) {
    const child_result r = plan(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.says;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("sublinear plan --help"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace sublinear::testing
