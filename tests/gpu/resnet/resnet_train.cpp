// A ResNet-style network trained with cuDNN and cuBLAS, allocating through sublinear's C
// API or through plain cudaMalloc: the program behind tests/gpu/resnet/resnet_train_test.cpp.
//
// Note [ResNet on cuDNN]
// Rationale: the replay engine must handle what a real training step does on a GPU:
//   library kernels it did not write (cuDNN convolutions and batch normalization, cuBLAS
//   GEMMs) whose parameters it only knows from their bytes, convolution workspaces
//   allocated and freed around a call, batch normalization's running statistics (a side
//   effect a replay must not repeat), in-place ReLUs and residual additions. The claim
//   to check is the product's: trained under a budget, the parameters are bit-identical
//   to training without sublinear, and mapped memory never exceeds the budget.
// Approach: a stem (3x3 conv, BN, ReLU), `blocks` residual blocks (conv, BN, ReLU, conv,
//   BN, + identity, ReLU) at constant width and resolution, global average pooling, a
//   linear head, softmax cross-entropy and SGD. Activations are allocated in forward and
//   freed in backward as a framework does; parameters, gradients and statistics live for
//   the whole run. Everything is deterministic by construction: convolution algorithms
//   are chosen explicitly (IMPLICIT_PRECOMP_GEMM forward, ALGO_1 for both backward
//   passes, FMA math: no TF32), BN uses the SPATIAL mode, cuBLAS runs in pedantic math
//   with a workspace we own, and our own kernels reduce in a fixed order. Data comes from
//   a Philox generator seeded by value, per iteration. --mode plain allocates with
//   cudaMalloc; --mode sublinear with sublinear_alloc, marks each iteration after the SGD
//   step (as the PyTorch optimizer hook does) and reads sublinear_get_stats per iteration;
//   the runtime takes its settings (SUBLINEAR_BUDGET, ...) from the environment.
// Limitations: one GPU, one stream, FP32, no downsampling stages: a ResNet in structure,
//   not ResNet-50. Plain mode's peak counts our own live bytes (cudaMalloc'd), not
//   cuDNN's or cuBLAS's internal allocations.
//
// Usage: gpu_resnet_train --mode plain|sublinear [--iterations N] [--batch N] [--blocks N]
//   [--channels N] [--size N] [--seed N] [--dump FILE] [--out FILE]
// Prints one JSON object (also written to --out). Exit status 0, 77 without a GPU, 1 on
// failure (the JSON says why), 2 on a usage error.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_environment.hpp"
#include "kernels/philox.hpp"
#include "resnet/resnet_kernels.hpp"
#include "sublinear/sublinear.h"

namespace sublinear::gpu_tests::resnet {
namespace {

// ---- errors --------------------------------------------------------------------------

std::string where(const char* file, int line) { return std::string(file) + ":" + std::to_string(line) + ": "; }

void check(cudaError_t e, const char* expr, const char* file, int line) {
  if (e != cudaSuccess) {
    throw std::runtime_error(where(file, line) + expr + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                             ")");
  }
}
void check(cudnnStatus_t e, const char* expr, const char* file, int line) {
  if (e != CUDNN_STATUS_SUCCESS) throw std::runtime_error(where(file, line) + expr + ": " + cudnnGetErrorString(e));
}
void check(cublasStatus_t e, const char* expr, const char* file, int line) {
  if (e != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(where(file, line) + expr + ": " + cublasGetStatusName(e) + " (" +
                             cublasGetStatusString(e) + ")");
  }
}
#define CHECK(expr) check((expr), #expr, __FILE__, __LINE__)

// ---- options -------------------------------------------------------------------------

struct options {
  std::string mode;
  int iterations = 6;
  int batch = 32;
  int blocks = 4;
  int channels = 32;
  int size = 32;
  int classes = 10;
  float lr = 0.05f;
  std::uint64_t seed = 2024;
  std::string dump, out;
};

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) throw usage_error("missing value after " + arg);
    const std::string value = argv[++i];
    auto positive = [&]() {
      char* end = nullptr;
      const long v = std::strtol(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0' || v <= 0 || v > 1 << 20) {
        throw usage_error(arg + " needs a positive integer, got '" + value + "'");
      }
      return static_cast<int>(v);
    };
    if (arg == "--mode") {
      o.mode = value;
    } else if (arg == "--iterations") {
      o.iterations = positive();
    } else if (arg == "--batch") {
      o.batch = positive();
    } else if (arg == "--blocks") {
      o.blocks = positive();
    } else if (arg == "--channels") {
      o.channels = positive();
    } else if (arg == "--size") {
      o.size = positive();
    } else if (arg == "--seed") {
      o.seed = static_cast<std::uint64_t>(positive());
    } else if (arg == "--dump") {
      o.dump = value;
    } else if (arg == "--out") {
      o.out = value;
    } else {
      throw usage_error("unknown argument '" + arg + "'");
    }
  }
  if (o.mode != "plain" && o.mode != "sublinear") throw usage_error("--mode must be plain or sublinear");
  return o;
}

// ---- memory: cudaMalloc or sublinear --------------------------------------------------

struct iteration_figures {
  double seconds = 0;
  double loss = 0;
  std::uint64_t peak_bytes = 0;  // sublinear: peak mapped; plain: peak of our live bytes
  std::uint64_t budget = 0;
  std::uint64_t evictions = 0, restores = 0;  // sublinear: totals so far
  std::uint64_t resident_peak = 0;
};

class memory {
 public:
  virtual ~memory() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* p, std::size_t bytes) noexcept = 0;
  // At the end of an iteration, after the device finished it: fills the memory figures
  // and starts the next iteration.
  virtual void end_iteration(iteration_figures& f) = 0;
};

class plain_memory final : public memory {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    CHECK(cudaMalloc(&p, bytes));
    live_ += bytes;
    if (live_ > peak_) peak_ = live_;
    return p;
  }
  void release(void* p, std::size_t bytes) noexcept override {
    cudaFree(p);
    live_ -= bytes;
  }
  void end_iteration(iteration_figures& f) override {
    f.peak_bytes = peak_;
    peak_ = live_;
  }

 private:
  std::uint64_t live_ = 0, peak_ = 0;
};

class sublinear_memory final : public memory {
 public:
  explicit sublinear_memory(cudaStream_t stream) : stream_(stream) {}
  void* allocate(std::size_t bytes) override {
    void* p = sublinear_alloc(static_cast<ssize_t>(bytes), 0, stream_);
    if (p == nullptr) {
      throw std::runtime_error("sublinear_alloc(" + std::to_string(bytes) + ") failed: " + sublinear_last_error());
    }
    return p;
  }
  void release(void* p, std::size_t bytes) noexcept override {
    sublinear_free(p, static_cast<ssize_t>(bytes), 0, stream_);
  }
  void end_iteration(iteration_figures& f) override {
    sublinear_stats s{};
    if (sublinear_get_stats(&s) != 0) {
      throw std::runtime_error(std::string("sublinear_get_stats failed (no allocator installed?): ") +
                               sublinear_last_error());
    }
    f.peak_bytes = s.mapped_peak;
    f.budget = s.budget;
    f.evictions = s.evictions;
    f.restores = s.restores;
    f.resident_peak = s.resident_peak;
    sublinear_reset_peaks();
    sublinear_mark_iteration();
  }

 private:
  cudaStream_t stream_;
};

// A device buffer that gives itself back; reset() frees it early, where a framework's
// tensor would die.
class buffer {
 public:
  buffer() = default;
  buffer(memory& m, std::size_t bytes) : memory_(&m), bytes_(bytes), p_(m.allocate(bytes)) {}
  buffer(buffer&& o) noexcept : memory_(o.memory_), bytes_(o.bytes_), p_(o.p_) { o.p_ = nullptr; }
  buffer& operator=(buffer&& o) noexcept {
    if (this != &o) {
      reset();
      memory_ = o.memory_;
      bytes_ = o.bytes_;
      p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  ~buffer() { reset(); }
  void reset() noexcept {
    if (p_ != nullptr) memory_->release(p_, bytes_);
    p_ = nullptr;
  }
  [[nodiscard]] float* f() const { return static_cast<float*>(p_); }
  [[nodiscard]] void* get() const { return p_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  memory* memory_ = nullptr;
  std::size_t bytes_ = 0;
  void* p_ = nullptr;
};

// ---- the network -----------------------------------------------------------------------

struct parameter {
  std::string name;
  buffer value, grad;  // grad is empty for running statistics
  std::size_t count = 0;
};

struct conv_layer {
  int cin = 0, cout = 0;
  parameter* weight = nullptr;
  cudnnFilterDescriptor_t filter = nullptr;
};

struct bn_layer {
  parameter *gamma = nullptr, *beta = nullptr, *mean = nullptr, *var = nullptr;
};

struct block_layers {
  conv_layer conv1, conv2;
  bn_layer bn1, bn2;
};

// What a block's forward keeps for its backward.
struct block_saved {
  buffer c1, y1, mean1, inv1, c2, y2, mean2, inv2;
};

constexpr double bn_momentum = 0.1;
constexpr double bn_epsilon = 1e-5;

class trainer {
 public:
  trainer(const options& o, memory& m, cudaStream_t stream) : o_(o), memory_(m), stream_(stream) {
    make_parameters();
    CHECK(cudnnCreate(&cudnn_));
    CHECK(cudnnSetStream(cudnn_, stream_));
    CHECK(cublasCreate(&cublas_));
    CHECK(cublasSetStream(cublas_, stream_));
    CHECK(cublasSetMathMode(cublas_, CUBLAS_PEDANTIC_MATH));
    cublas_workspace_ = buffer(memory_, 4u << 20);
    CHECK(cublasSetWorkspace(cublas_, cublas_workspace_.get(), cublas_workspace_.bytes()));
    make_descriptors();
  }

  ~trainer() {
    cudnnDestroyTensorDescriptor(image_desc_);
    cudnnDestroyTensorDescriptor(act_desc_);
    cudnnDestroyTensorDescriptor(bn_desc_);
    cudnnDestroyConvolutionDescriptor(conv_desc_);
    cudnnDestroyFilterDescriptor(stem_.filter);
    for (auto& b : blocks_) {
      cudnnDestroyFilterDescriptor(b.conv1.filter);
      cudnnDestroyFilterDescriptor(b.conv2.filter);
    }
    cublasDestroy(cublas_);
    cudnnDestroy(cudnn_);
  }
  trainer(const trainer&) = delete;
  trainer& operator=(const trainer&) = delete;

  iteration_figures step(int iteration) {
    const auto start = std::chrono::steady_clock::now();
    iteration_figures f;
    std::vector<float> losses(static_cast<std::size_t>(o_.batch));
    {
      const int n = o_.batch, c = o_.channels, hw = o_.size * o_.size, k = o_.classes;
      const auto it = static_cast<std::uint64_t>(iteration);
      buffer input(memory_, floats(n * 3 * hw));
      buffer labels(memory_, sizeof(std::int32_t) * static_cast<std::size_t>(n));
      CHECK(fill_uniform(philox_state{o_.seed, 2 * it}, input.f(), n * 3 * hw, -1.0f, 1.0f, stream_));
      CHECK(fill_labels(philox_state{o_.seed, 2 * it + 1}, static_cast<std::int32_t*>(labels.get()), n, k, stream_));

      // Forward.
      buffer c0 = conv_forward(input, image_desc_, stem_);
      buffer y0(memory_, c0.bytes()), mean0, inv0;
      bn_forward(c0, stem_bn_, y0, mean0, inv0);
      CHECK(relu_in_place(y0.f(), activation_count(), stream_));
      std::vector<block_saved> saved(blocks_.size());
      const buffer* x = &y0;
      for (std::size_t b = 0; b < blocks_.size(); ++b) {
        block_forward(*x, blocks_[b], saved[b]);
        x = &saved[b].y2;
      }
      buffer feat(memory_, floats(n * c));
      CHECK(average_pool(x->f(), feat.f(), n * c, hw, stream_));
      buffer logits(memory_, floats(n * k));
      const float one = 1.0f, zero = 0.0f;
      // logits[N][K] = feat[N][C] * W[K][C]^T (column-major: W^T-view times feat).
      CHECK(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, k, n, c, &one, fc_w_->value.f(), c, feat.f(), c, &zero,
                        logits.f(), k));
      CHECK(add_row_bias(logits.f(), fc_b_->value.f(), n, k, stream_));
      buffer loss(memory_, floats(n)), dlogits(memory_, floats(n * k));
      CHECK(softmax_cross_entropy(logits.f(), static_cast<std::int32_t*>(labels.get()), loss.f(), dlogits.f(), n, k,
                                  stream_));
      CHECK(cudaMemcpyAsync(losses.data(), loss.get(), loss.bytes(), cudaMemcpyDeviceToHost, stream_));
      loss.reset();
      logits.reset();
      labels.reset();

      // Backward: the head.
      CHECK(column_sums(dlogits.f(), fc_b_->grad.f(), n, k, stream_));
      // dW[K][C] = dlogits^T * feat; dfeat[N][C] = dlogits * W.
      CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, c, k, n, &one, feat.f(), c, dlogits.f(), k, &zero,
                        fc_w_->grad.f(), c));
      buffer dfeat(memory_, floats(n * c));
      CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, c, n, k, &one, fc_w_->value.f(), c, dlogits.f(), k, &zero,
                        dfeat.f(), c));
      feat.reset();
      dlogits.reset();
      buffer d(memory_, floats(activation_count()));
      CHECK(average_pool_backward(dfeat.f(), d.f(), n * c, hw, stream_));
      dfeat.reset();

      // Backward: the blocks, then the stem.
      for (std::size_t b = blocks_.size(); b-- > 0;) {
        const buffer& block_input = b == 0 ? y0 : saved[b - 1].y2;
        d = block_backward(block_input, blocks_[b], saved[b], std::move(d));
      }
      CHECK(relu_backward_in_place(y0.f(), d.f(), activation_count(), stream_));
      y0.reset();
      buffer dc0 = bn_backward(c0, d, stem_bn_, mean0, inv0);
      d.reset();
      c0.reset();
      mean0.reset();
      inv0.reset();
      conv_backward_filter(input, image_desc_, dc0, stem_);
      dc0.reset();
      input.reset();

      // SGD.
      for (auto& p : parameters_) {
        if (p->grad.get() != nullptr) {
          CHECK(sgd_step(p->value.f(), p->grad.f(), static_cast<std::int64_t>(p->count), o_.lr, stream_));
        }
      }
    }
    CHECK(cudaStreamSynchronize(stream_));
    f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const float l : losses) f.loss += l;
    f.loss /= o_.batch;
    memory_.end_iteration(f);
    return f;
  }

  // Every parameter and statistic, in a fixed order, as bytes (see write_dump).
  void dump(const std::string& path) const {
    std::ofstream out(path, std::ios::binary);
    if (!out) throw std::runtime_error("cannot write " + path);
    out << "sublinear-params 1\n";
    for (const auto& p : parameters_) {
      std::vector<float> host(p->count);
      CHECK(cudaMemcpy(host.data(), p->value.get(), p->value.bytes(), cudaMemcpyDeviceToHost));
      out << p->name << ' ' << p->count << '\n';
      out.write(reinterpret_cast<const char*>(host.data()), static_cast<std::streamsize>(p->value.bytes()));
      out << '\n';
    }
    if (!out) throw std::runtime_error("writing " + path + " failed");
  }

 private:
  static std::size_t floats(std::int64_t n) { return sizeof(float) * static_cast<std::size_t>(n); }
  [[nodiscard]] std::int64_t activation_count() const {
    return static_cast<std::int64_t>(o_.batch) * o_.channels * o_.size * o_.size;
  }

  parameter* add_parameter(const std::string& name, std::size_t count, bool trained) {
    auto p = std::make_unique<parameter>();
    p->name = name;
    p->count = count;
    p->value = buffer(memory_, sizeof(float) * count);
    if (trained) p->grad = buffer(memory_, sizeof(float) * count);
    parameters_.push_back(std::move(p));
    return parameters_.back().get();
  }

  // Deterministic initial values, drawn on the host from the same generator.
  void upload(parameter* p, float lo, float hi, std::uint64_t stream_id) {
    std::vector<float> host(p->count);
    for (std::size_t i = 0; i < p->count; ++i) {
      host[i] = lo + (hi - lo) * philox_uniform(philox_state{o_.seed + 7, stream_id}, i);
    }
    CHECK(cudaMemcpy(p->value.get(), host.data(), p->value.bytes(), cudaMemcpyHostToDevice));
  }
  void upload_constant(parameter* p, float v) {
    const std::vector<float> host(p->count, v);
    CHECK(cudaMemcpy(p->value.get(), host.data(), p->value.bytes(), cudaMemcpyHostToDevice));
  }

  conv_layer make_conv(const std::string& name, int cin, int cout) {
    conv_layer l;
    l.cin = cin;
    l.cout = cout;
    l.weight = add_parameter(name + ".weight", static_cast<std::size_t>(cin) * cout * 9, true);
    const float bound = std::sqrt(6.0f / static_cast<float>(cin * 9));
    upload(l.weight, -bound, bound, parameters_.size());
    return l;
  }
  bn_layer make_bn(const std::string& name) {
    const auto c = static_cast<std::size_t>(o_.channels);
    bn_layer l;
    l.gamma = add_parameter(name + ".weight", c, true);
    l.beta = add_parameter(name + ".bias", c, true);
    l.mean = add_parameter(name + ".running_mean", c, false);
    l.var = add_parameter(name + ".running_var", c, false);
    upload_constant(l.gamma, 1.0f);
    upload_constant(l.beta, 0.0f);
    upload_constant(l.mean, 0.0f);
    upload_constant(l.var, 1.0f);
    return l;
  }

  void make_parameters() {
    stem_ = make_conv("stem.conv", 3, o_.channels);
    stem_bn_ = make_bn("stem.bn");
    for (int b = 0; b < o_.blocks; ++b) {
      const std::string name = "block" + std::to_string(b);
      block_layers l;
      l.conv1 = make_conv(name + ".conv1", o_.channels, o_.channels);
      l.bn1 = make_bn(name + ".bn1");
      l.conv2 = make_conv(name + ".conv2", o_.channels, o_.channels);
      l.bn2 = make_bn(name + ".bn2");
      blocks_.push_back(l);
    }
    fc_w_ = add_parameter("fc.weight", static_cast<std::size_t>(o_.classes) * o_.channels, true);
    const float bound = 1.0f / std::sqrt(static_cast<float>(o_.channels));
    upload(fc_w_, -bound, bound, parameters_.size());
    fc_b_ = add_parameter("fc.bias", static_cast<std::size_t>(o_.classes), true);
    upload_constant(fc_b_, 0.0f);
  }

  void make_filter(conv_layer& l) {
    CHECK(cudnnCreateFilterDescriptor(&l.filter));
    CHECK(cudnnSetFilter4dDescriptor(l.filter, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, l.cout, l.cin, 3, 3));
  }

  void make_descriptors() {
    CHECK(cudnnCreateTensorDescriptor(&image_desc_));
    CHECK(cudnnSetTensor4dDescriptor(image_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, o_.batch, 3, o_.size, o_.size));
    CHECK(cudnnCreateTensorDescriptor(&act_desc_));
    CHECK(cudnnSetTensor4dDescriptor(act_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, o_.batch, o_.channels, o_.size,
                                     o_.size));
    CHECK(cudnnCreateTensorDescriptor(&bn_desc_));
    CHECK(cudnnDeriveBNTensorDescriptor(bn_desc_, act_desc_, CUDNN_BATCHNORM_SPATIAL));
    CHECK(cudnnCreateConvolutionDescriptor(&conv_desc_));
    CHECK(cudnnSetConvolution2dDescriptor(conv_desc_, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CHECK(cudnnSetConvolutionMathType(conv_desc_, CUDNN_FMA_MATH));
    make_filter(stem_);
    for (auto& b : blocks_) {
      make_filter(b.conv1);
      make_filter(b.conv2);
    }
  }

  // A convolution workspace lives for one call, as in a framework.
  buffer workspace(std::size_t bytes) { return bytes == 0 ? buffer() : buffer(memory_, bytes); }

  buffer conv_forward(const buffer& x, cudnnTensorDescriptor_t x_desc, const conv_layer& l) {
    std::size_t ws_bytes = 0;
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(cudnn_, x_desc, l.filter, conv_desc_, act_desc_, fwd_algo, &ws_bytes));
    buffer ws = workspace(ws_bytes);
    buffer y(memory_, floats(activation_count()));
    const float one = 1.0f, zero = 0.0f;
    CHECK(cudnnConvolutionForward(cudnn_, &one, x_desc, x.get(), l.filter, l.weight->value.get(), conv_desc_, fwd_algo,
                                  ws.get(), ws_bytes, &zero, act_desc_, y.get()));
    return y;
  }

  buffer conv_backward_data(const buffer& dy, const conv_layer& l) {
    std::size_t ws_bytes = 0;
    CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(cudnn_, l.filter, act_desc_, conv_desc_, act_desc_, bwd_data_algo,
                                                       &ws_bytes));
    buffer ws = workspace(ws_bytes);
    buffer dx(memory_, floats(activation_count()));
    const float one = 1.0f, zero = 0.0f;
    CHECK(cudnnConvolutionBackwardData(cudnn_, &one, l.filter, l.weight->value.get(), act_desc_, dy.get(), conv_desc_,
                                       bwd_data_algo, ws.get(), ws_bytes, &zero, act_desc_, dx.get()));
    return dx;
  }

  void conv_backward_filter(const buffer& x, cudnnTensorDescriptor_t x_desc, const buffer& dy, const conv_layer& l) {
    std::size_t ws_bytes = 0;
    CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnn_, x_desc, act_desc_, conv_desc_, l.filter,
                                                         bwd_filter_algo, &ws_bytes));
    buffer ws = workspace(ws_bytes);
    const float one = 1.0f, zero = 0.0f;
    CHECK(cudnnConvolutionBackwardFilter(cudnn_, &one, x_desc, x.get(), act_desc_, dy.get(), conv_desc_, bwd_filter_algo,
                                         ws.get(), ws_bytes, &zero, l.filter, l.weight->grad.get()));
  }

  void bn_forward(const buffer& x, const bn_layer& l, buffer& y, buffer& mean, buffer& inv) {
    mean = buffer(memory_, floats(o_.channels));
    inv = buffer(memory_, floats(o_.channels));
    const float one = 1.0f, zero = 0.0f;
    CHECK(cudnnBatchNormalizationForwardTraining(cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, act_desc_, x.get(),
                                                 act_desc_, y.get(), bn_desc_, l.gamma->value.get(),
                                                 l.beta->value.get(), bn_momentum, l.mean->value.get(),
                                                 l.var->value.get(), bn_epsilon, mean.get(), inv.get()));
  }

  buffer bn_backward(const buffer& x, const buffer& dy, const bn_layer& l, const buffer& mean, const buffer& inv) {
    buffer dx(memory_, floats(activation_count()));
    const float one = 1.0f, zero = 0.0f;
    CHECK(cudnnBatchNormalizationBackward(cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, act_desc_, x.get(),
                                          act_desc_, dy.get(), act_desc_, dx.get(), bn_desc_, l.gamma->value.get(),
                                          l.gamma->grad.get(), l.beta->grad.get(), bn_epsilon, mean.get(), inv.get()));
    return dx;
  }

  void block_forward(const buffer& x, const block_layers& l, block_saved& s) {
    s.c1 = conv_forward(x, act_desc_, l.conv1);
    s.y1 = buffer(memory_, s.c1.bytes());
    bn_forward(s.c1, l.bn1, s.y1, s.mean1, s.inv1);
    CHECK(relu_in_place(s.y1.f(), activation_count(), stream_));
    s.c2 = conv_forward(s.y1, act_desc_, l.conv2);
    s.y2 = buffer(memory_, s.c2.bytes());
    bn_forward(s.c2, l.bn2, s.y2, s.mean2, s.inv2);
    CHECK(add_in_place(s.y2.f(), x.f(), activation_count(), stream_));
    CHECK(relu_in_place(s.y2.f(), activation_count(), stream_));
  }

  // dout: the gradient of the block's output (consumed); returns its input's gradient.
  buffer block_backward(const buffer& x, const block_layers& l, block_saved& s, buffer dout) {
    CHECK(relu_backward_in_place(s.y2.f(), dout.f(), activation_count(), stream_));
    s.y2.reset();
    buffer dc2 = bn_backward(s.c2, dout, l.bn2, s.mean2, s.inv2);
    s.c2.reset();
    s.mean2.reset();
    s.inv2.reset();
    buffer dy1 = conv_backward_data(dc2, l.conv2);
    conv_backward_filter(s.y1, act_desc_, dc2, l.conv2);
    dc2.reset();
    CHECK(relu_backward_in_place(s.y1.f(), dy1.f(), activation_count(), stream_));
    s.y1.reset();
    buffer dc1 = bn_backward(s.c1, dy1, l.bn1, s.mean1, s.inv1);
    dy1.reset();
    s.c1.reset();
    s.mean1.reset();
    s.inv1.reset();
    buffer dx = conv_backward_data(dc1, l.conv1);
    conv_backward_filter(x, act_desc_, dc1, l.conv1);
    dc1.reset();
    CHECK(add_in_place(dx.f(), dout.f(), activation_count(), stream_));
    return dx;
  }

  static constexpr cudnnConvolutionFwdAlgo_t fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  static constexpr cudnnConvolutionBwdDataAlgo_t bwd_data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  static constexpr cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;

  const options& o_;
  memory& memory_;
  cudaStream_t stream_;
  std::vector<std::unique_ptr<parameter>> parameters_;
  conv_layer stem_;
  bn_layer stem_bn_;
  std::vector<block_layers> blocks_;
  parameter* fc_w_ = nullptr;
  parameter* fc_b_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  buffer cublas_workspace_;
  cudnnTensorDescriptor_t image_desc_ = nullptr, act_desc_ = nullptr, bn_desc_ = nullptr;
  cudnnConvolutionDescriptor_t conv_desc_ = nullptr;
};

// ---- output ---------------------------------------------------------------------------

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return out + "\"";
}

template <class F>
std::string array(const std::vector<iteration_figures>& figures, F field) {
  std::ostringstream s;
  s.precision(9);
  s << "[";
  for (std::size_t i = 0; i < figures.size(); ++i) s << (i ? ", " : "") << field(figures[i]);
  s << "]";
  return s.str();
}

std::string result_json(const options& o, const std::vector<iteration_figures>& figures) {
  std::ostringstream s;
  s << "{\"status\": \"passed\", \"mode\": " << quoted(o.mode) << ", \"iterations\": " << o.iterations
    << ", \"batch\": " << o.batch << ", \"blocks\": " << o.blocks << ", \"channels\": " << o.channels
    << ", \"size\": " << o.size << ",\n \"loss\": " << array(figures, [](auto& f) { return f.loss; })
    << ",\n \"iteration_s\": " << array(figures, [](auto& f) { return f.seconds; })
    << ",\n \"peak_bytes\": " << array(figures, [](auto& f) { return f.peak_bytes; })
    << ",\n \"budget_bytes\": " << array(figures, [](auto& f) { return f.budget; })
    << ",\n \"evictions\": " << array(figures, [](auto& f) { return f.evictions; })
    << ",\n \"restores\": " << array(figures, [](auto& f) { return f.restores; })
    << ",\n \"resident_peak_bytes\": " << array(figures, [](auto& f) { return f.resident_peak; }) << "}";
  return s.str();
}

void emit(const options& o, const std::string& json) {
  std::printf("%s\n", json.c_str());
  std::fflush(stdout);
  if (!o.out.empty()) {
    std::ofstream out(o.out);
    out << json << "\n";
  }
}

int run(int argc, char** argv) {
  options o;
  try {
    o = parse(argc, argv);
  } catch (const usage_error& e) {
    std::fprintf(stderr,
                 "gpu_resnet_train: %s\nusage: gpu_resnet_train --mode plain|sublinear [--iterations N] [--batch N] "
                 "[--blocks N] [--channels N] [--size N] [--seed N] [--dump FILE] [--out FILE]\n",
                 e.what());
    return 2;
  }
  if (const std::string why = cuda_unavailable_reason(); !why.empty()) {
    std::fprintf(stderr, "gpu_resnet_train: %s\n", why.c_str());
    emit(o, "{\"status\": \"skipped\", \"reason\": " + quoted(why) + "}");
    return skip_exit_code;
  }
  try {
    CHECK(cudaSetDevice(0));
    cudaStream_t stream = nullptr;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::unique_ptr<memory> m;
    if (o.mode == "plain") {
      m = std::make_unique<plain_memory>();
    } else {
      m = std::make_unique<sublinear_memory>(stream);
    }
    std::vector<iteration_figures> figures;
    {
      trainer t(o, *m, stream);
      for (int i = 0; i < o.iterations; ++i) figures.push_back(t.step(i));
      if (!o.dump.empty()) t.dump(o.dump);
    }
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaStreamDestroy(stream));
    emit(o, result_json(o, figures));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_resnet_train: %s\n", e.what());
    emit(o, "{\"status\": \"failed\", \"reason\": " + quoted(e.what()) + "}");
    return 1;
  }
}

}  // namespace
}  // namespace sublinear::gpu_tests::resnet

int main(int argc, char** argv) { return sublinear::gpu_tests::resnet::run(argc, argv); }
