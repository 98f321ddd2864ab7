// The warning for a program whose memory sublinear cannot see.
//
// Note [Hidden allocations]
// Rationale: the preload route sees the allocations a program makes through cudaMalloc.
//   PyTorch's caching allocator makes a few large ones and serves every tensor from them,
//   so sublinear sees no buffer come and go, plans nothing and saves nothing, and the run
//   looks normal. `sublinear run` sets PYTORCH_NO_CUDA_MEMORY_CACHING=1, but LD_PRELOAD set
//   by hand, or the variable set to something else, brings the caching back.
// Approach: when the traced iterations end, the process runtime compares the last traced
//   iteration's allocations and frees with its launches: a training iteration whose
//   tensors are allocated through sublinear makes about one allocation or free per launch
//   or two, a program whose allocator caches makes none. Fewer than one per
//   kLaunchesPerAllocation launches, over at least that many launches, warns once, naming
//   the likely cause and the variable as this process has it.
// Limitations: a program that carves all its memory from one allocation of its own warns
//   too (the message says "most likely"); one that allocates a little per iteration from
//   a cache does not.
#pragma once

#include <cstddef>
#include <string>

namespace sublinear::runtime {

inline constexpr std::size_t kLaunchesPerAllocation = 32;

// The warning for one traced iteration ("" when it saw enough allocations).
// `pytorch_caching` is the value of PYTORCH_NO_CUDA_MEMORY_CACHING in the process
// (nullptr: unset).
std::string hidden_allocations_warning(std::size_t allocations_and_frees, std::size_t launches,
                                       const char* pytorch_caching);

}  // namespace sublinear::runtime
