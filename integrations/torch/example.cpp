// sublinear_torch_example: a LibTorch training loop under sublinear, and the check that the
// helper (include/sublinear/torch.hpp) does what it says.
//
//   sublinear_torch_example [--plain] [--budget B] [--steps N]
//
// Trains a small MLP with dropout for N steps (default 8) and prints one line of JSON:
// the parameters' checksum (compare a run with --plain: they must be equal), sublinear's
// statistics and status. Exit status: 0 when every check passed, 1 when one failed, 77 when
// there is no GPU (the no-GPU message of install() is then what is checked).
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "sublinear/torch.hpp"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++failures;
  }
}

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

}  // namespace

int main(int argc, char** argv) {
  bool plain = false;
  std::string budget;
  int steps = 8;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--plain") == 0) {
      plain = true;
    } else if (std::strcmp(argv[i], "--budget") == 0 && i + 1 < argc) {
      budget = argv[++i];
    } else if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--plain] [--budget B] [--steps N]\n", argv[0]);
      return 2;
    }
  }

  if (!torch::cuda::is_available()) {
    try {
      sublinear::torch::install();
      std::fprintf(stderr, "FAILED: install() without a GPU did not throw\n");
      return 1;
    } catch (const std::runtime_error& e) {
      if (!contains(e.what(), "no CUDA device")) {
        std::fprintf(stderr, "FAILED: install() without a GPU said: %s\n", e.what());
        return 1;
      }
      std::printf("skipped: %s\n", e.what());
      return 77;
    }
  }

  if (!plain) sublinear::torch::install({.budget = budget, .policy = {}, .report = {}});

  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(256, 512), torch::nn::ReLU(), torch::nn::Dropout(0.1),
                              torch::nn::Linear(512, 512), torch::nn::ReLU(), torch::nn::Linear(512, 10));
  model->to(torch::kCUDA);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));
  const auto data = torch::randn({128, 256}, torch::kCUDA);
  const auto target = torch::randint(0, 10, {128}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong));
  for (int s = 0; s < steps; ++s) {
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(data), target);
    loss.backward();
    if (plain) {
      optimizer.step();
    } else {
      sublinear::torch::step(optimizer);
    }
  }
  // A tensor used on a second stream: record_stream must reach sublinear (no crash, no reuse).
  {
    auto side = c10::cuda::getStreamFromPool();
    auto t = torch::ones({1024}, torch::kCUDA);
    t.record_stream(side);
  }
  c10::cuda::CUDACachingAllocator::emptyCache();  // reaches sublinear_empty_cache through reset
  torch::cuda::synchronize();

  double checksum = 0.0;
  for (const auto& p : model->parameters()) checksum += p.detach().to(torch::kDouble).abs().sum().item<double>();

  std::string extra;
  if (!plain) {
    const sublinear_stats st = sublinear::torch::stats();
    check(st.allocs > 0, "allocations reach sublinear (stats().allocs > 0)");
    const std::string status = sublinear::torch::status();
    check(contains(status, "active"), "status() says active: " + status);
    try {
      sublinear::torch::install();
      check(false, "a second install() after CUDA was used throws");
    } catch (const std::runtime_error& e) {
      check(contains(e.what(), "already in use"), std::string("the second install() says why: ") + e.what());
    }
    extra = ", \"allocs\": " + std::to_string(st.allocs) + ", \"mapped_peak\": " + std::to_string(st.mapped_peak) +
            ", \"evictions\": " + std::to_string(st.evictions) + ", \"status\": \"" + status + "\"";
  }
  std::printf("{\"mode\": \"%s\", \"checksum\": %.17g%s}\n", plain ? "plain" : "sublinear", checksum, extra.c_str());
  return failures == 0 ? 0 : 1;
}
