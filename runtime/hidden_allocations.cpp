#include "runtime/hidden_allocations.hpp"

namespace sublinear::runtime {

std::string hidden_allocations_warning(std::size_t allocations_and_frees, std::size_t launches,
                                       const char* pytorch_caching) {
  if (launches < kLaunchesPerAllocation || allocations_and_frees * kLaunchesPerAllocation >= launches) return {};
  const std::string variable =
      pytorch_caching == nullptr ? std::string("PYTORCH_NO_CUDA_MEMORY_CACHING is unset in this process")
                                 : "PYTORCH_NO_CUDA_MEMORY_CACHING is '" + std::string(pytorch_caching) + "' here";
  return "sublinear: warning: the last traced iteration launched " + std::to_string(launches) +
         " kernels and copies but allocated or freed through sublinear only " + std::to_string(allocations_and_frees) +
         " times: the program's memory is held by an allocator of its own, most likely PyTorch's caching allocator, "
         "and sublinear has nothing to evict. Run PyTorch with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (" + variable +
         "; `sublinear run` sets it when it is unset), or use sublinear.torch.enable() instead of the preload route.";
}

}  // namespace sublinear::runtime
