// Trains the cuDNN + cuBLAS ResNet (gpu_resnet_train) three times in child processes: twice
// with cudaMalloc and once through sublinear under a budget (SUBLINEAR_BUDGET in the
// child's environment, 0.5x of the traced peak unless GPU_SUITE_RESNET_BUDGET says
// otherwise), and compares the parameters after training byte for byte.
//
// Child processes, not threads: sublinear's process runtime is created once per process
// from its environment, and a run without sublinear must not have it loaded at all.
// Without a GPU the trainer exits with status 77 and its reason, and every case here
// skips with that reason, except the one that checks that the program starts and says it.
//
// GPU_SUITE_ARTIFACTS=DIR keeps the children's JSON, stderr and parameter dumps there
// (scripts/gpu-suite.sh collects the figures from it); GPU_SUITE_QUICK=1 trains a smaller
// network.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace sublinear::gpu_tests {
namespace {

constexpr int skip_exit_code = 77;

struct child_run {
  int exit_status = -1;
  std::string json;    // what the trainer printed
  std::string errors;  // its stderr
  std::string dump;    // path of its parameter dump
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The string value of "key" in a flat JSON object, or "".
std::string json_string(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\": \"";
  const auto at = json.find(needle);
  if (at == std::string::npos) return "";
  std::string out;
  for (std::size_t i = at + needle.size(); i < json.size() && json[i] != '"'; ++i) {
    if (json[i] == '\\' && i + 1 < json.size()) ++i;
    out += json[i];
  }
  return out;
}

// The numbers of the array "key" in a flat JSON object.
std::vector<double> json_numbers(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\": [";
  const auto at = json.find(needle);
  std::vector<double> out;
  if (at == std::string::npos) return out;
  const auto end = json.find(']', at);
  std::istringstream in(json.substr(at + needle.size(), end - at - needle.size()));
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::strtod(item.c_str(), nullptr));
  return out;
}

// name -> raw bytes, from the trainer's dump format.
std::map<std::string, std::string> read_dump(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::map<std::string, std::string> tensors;
  std::string line;
  if (!std::getline(in, line) || line != "sublinear-params 1") return tensors;
  while (std::getline(in, line)) {
    const auto space = line.find(' ');
    if (space == std::string::npos) break;
    const std::size_t count = std::stoull(line.substr(space + 1));
    std::string bytes(count * sizeof(float), '\0');
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    in.get();
    tensors[line.substr(0, space)] = bytes;
  }
  return tensors;
}

// One scratch folder per process. A temporary one goes when the process ends unless a test
// failed (its files are then what to read); GPU_SUITE_ARTIFACTS's is always kept.
class scratch_folder {
 public:
  scratch_folder() {
    std::string pattern = (std::filesystem::temp_directory_path() / "sublinear-gpu-resnet-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~scratch_folder() {
    if (path_.empty() || ::testing::UnitTest::GetInstance()->Failed()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  scratch_folder(const scratch_folder&) = delete;
  scratch_folder& operator=(const scratch_folder&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::filesystem::path artifacts() {
  if (const char* dir = std::getenv("GPU_SUITE_ARTIFACTS"); dir != nullptr && *dir != '\0') {
    std::filesystem::create_directories(dir);
    return dir;
  }
  static const scratch_folder scratch;
  if (scratch.path().empty()) throw std::runtime_error("cannot create a scratch folder under " +
                                                       std::filesystem::temp_directory_path().string());
  return scratch.path();
}

std::vector<std::string> trainer_arguments() {
  const char* quick = std::getenv("GPU_SUITE_QUICK");
  if (quick != nullptr && std::string(quick) == "1") {
    return {"--iterations", "6", "--batch", "32", "--blocks", "4", "--channels", "64", "--size", "32"};
  }
  return {"--iterations", "6", "--batch", "32", "--blocks", "6", "--channels", "64", "--size", "32"};
}

// Runs the trainer in mode `mode` with `settings` (NAME=value) added to an environment
// from which every SUBLINEAR_* variable of ours has been removed.
// `extra` arguments come last and so win over the defaults.
// The trainer beside this test's own executable, so that a build directory copied to another
// machine (the GPU machine gets stripped copies) still finds it; the build's path otherwise.
std::string trainer_program() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path beside = self.parent_path() / "gpu_resnet_train";
    if (std::filesystem::exists(beside, ec)) return beside.string();
  }
  return SUBLINEAR_GPU_RESNET_TRAIN;
}

child_run train(const std::string& tag, const std::string& mode, const std::vector<std::string>& settings,
                const std::vector<std::string>& extra = {}) {
  const std::filesystem::path dir = artifacts();
  child_run run;
  run.dump = (dir / (tag + ".params")).string();
  const std::string out = (dir / (tag + ".json")).string();
  const std::string err = (dir / (tag + ".stderr")).string();
  std::filesystem::remove(out);

  std::vector<std::string> args{trainer_program(), "--mode", mode, "--dump", run.dump, "--out", out};
  for (auto& a : trainer_arguments()) args.push_back(a);
  for (const auto& a : extra) args.push_back(a);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "SUBLINEAR_", 10) != 0) env.emplace_back(*e);
  }
  for (const auto& s : settings) env.push_back(s);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  for (auto& e : env) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);

  const pid_t pid = fork();
  if (pid == 0) {
    const int null_out = open("/dev/null", O_WRONLY);
    const int err_fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (null_out >= 0) dup2(null_out, STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return run;
  run.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.json = read_file(out);
  run.errors = read_file(err);
  return run;
}

std::string describe(const child_run& r) {
  std::string tail = r.errors.size() > 2000 ? r.errors.substr(r.errors.size() - 2000) : r.errors;
  return "exit status " + std::to_string(r.exit_status) + ", reason: " + json_string(r.json, "reason") +
         "\nstderr (end):\n" + tail;
}

class ResnetTrainingOnGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    plain_ = train("resnet-plain", "plain", {});
    if (plain_.exit_status == skip_exit_code) return;
    plain_again_ = train("resnet-plain-again", "plain", {});
    const char* budget = std::getenv("GPU_SUITE_RESNET_BUDGET");
    const std::string dir = artifacts().string();
    budgeted_ = train("resnet-sublinear", "sublinear",
                      {std::string("SUBLINEAR_BUDGET=") + (budget != nullptr && *budget ? budget : "0.5x"),
                       "SUBLINEAR_REPORT=" + dir + "/resnet-sublinear-report.json", "SUBLINEAR_LOG=info"});
  }

  void SetUp() override {
    if (plain_.exit_status == skip_exit_code) GTEST_SKIP() << json_string(plain_.json, "reason");
    ASSERT_EQ(plain_.exit_status, 0) << "the plain run failed: " << describe(plain_);
  }

  static void expect_same_parameters(const child_run& expected, const child_run& actual) {
    const auto a = read_dump(expected.dump), b = read_dump(actual.dump);
    ASSERT_FALSE(a.empty()) << "no parameters in " << expected.dump;
    ASSERT_EQ(a.size(), b.size()) << "the dumps list different tensors";
    std::vector<std::string> differing;
    for (const auto& [name, bytes] : a) {
      const auto it = b.find(name);
      if (it == b.end() || it->second != bytes) differing.push_back(name);
    }
    EXPECT_TRUE(differing.empty()) << differing.size() << " of " << a.size() << " tensors differ, first: "
                                   << differing.front();
  }

  static child_run plain_, plain_again_, budgeted_;
};

child_run ResnetTrainingOnGpu::plain_;
child_run ResnetTrainingOnGpu::plain_again_;
child_run ResnetTrainingOnGpu::budgeted_;

TEST(ResnetTrainer, StartsWithoutADriverAndSaysWhy) {
  // Tiny, in case there is a GPU: then this only shows the trainer runs at all.
  const child_run r = train("resnet-probe", "plain", {}, {"--iterations", "1", "--blocks", "1", "--batch", "2"});
  if (r.exit_status == 0) GTEST_SKIP() << "a GPU is present: the trainer ran";
  EXPECT_EQ(r.exit_status, skip_exit_code) << describe(r);
  EXPECT_EQ(json_string(r.json, "status"), "skipped");
  EXPECT_EQ(json_string(r.json, "reason").rfind("no CUDA", 0), 0u) << r.json;
}

TEST(ResnetTrainer, RefusesAnUnknownMode) {
  const child_run r = train("resnet-usage", "sometimes", {});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_NE(r.errors.find("--mode must be plain or sublinear"), std::string::npos) << r.errors;
}

TEST_F(ResnetTrainingOnGpu, PlainTrainingIsReproducible) {
  // Without this, a difference under sublinear could be the model's own nondeterminism.
  ASSERT_EQ(plain_again_.exit_status, 0) << describe(plain_again_);
  expect_same_parameters(plain_, plain_again_);
}

TEST_F(ResnetTrainingOnGpu, BudgetedTrainingEndsWithBitIdenticalParameters) {
  ASSERT_EQ(budgeted_.exit_status, 0) << "the budgeted run failed: " << describe(budgeted_);
  expect_same_parameters(plain_, budgeted_);
}

TEST_F(ResnetTrainingOnGpu, BudgetIsInForceAfterTheTracedIterations) {
  ASSERT_EQ(budgeted_.exit_status, 0) << describe(budgeted_);
  const auto budget = json_numbers(budgeted_.json, "budget_bytes");
  ASSERT_FALSE(budget.empty()) << budgeted_.json;
  EXPECT_GT(budget.back(), 0.0) << "no budget was in force in the last iteration (refused at plan time?)\n"
                                << describe(budgeted_);
  const auto evictions = json_numbers(budgeted_.json, "evictions");
  ASSERT_FALSE(evictions.empty());
  EXPECT_GT(evictions.back(), 0.0) << "a budget below the traced peak was met without evicting anything";
}

TEST_F(ResnetTrainingOnGpu, PeakMappedNeverExceedsTheBudget) {
  ASSERT_EQ(budgeted_.exit_status, 0) << describe(budgeted_);
  const auto budget = json_numbers(budgeted_.json, "budget_bytes");
  const auto peak = json_numbers(budgeted_.json, "peak_bytes");
  ASSERT_EQ(budget.size(), peak.size());
  for (std::size_t i = 0; i < budget.size(); ++i) {
    if (budget[i] > 0) {
      EXPECT_LE(peak[i], budget[i]) << "iteration " << i;
    }
  }
}

}  // namespace
}  // namespace sublinear::gpu_tests
