// Normalizing CUDA's two launch forms into one packed parameter block.
//
// Note [Packed parameters]
// Rationale: cuLaunchKernel takes its arguments either as `kernelParams` (one pointer per
//   parameter, each pointing at the value) or as `extra` (one buffer already laid out as
//   the device sees it). The scanner, the trace and the replay engine want one form.
// Approach: the packed form is the device layout: parameter i's bytes at the offset
//   cuFuncGetParamInfo reports, zeros in between, total size = end of the last parameter.
//   kernelParams is packed with the layout; an `extra` buffer is copied verbatim (it is
//   already in that layout). A replay passes the packed block back through `extra`. The
//   host device normalizes its own launch_unpacked the same way before hooks see it.
// Limitations: a kernel whose layout cannot be queried can only be recorded from the
//   extra form. Plain code: nothing here touches a device, so it is tested on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tracer/events.hpp"

namespace sublinear::tracer {

// cuda.h's CU_LAUNCH_PARAM_* keys (as integers: this header does not include cuda.h).
inline constexpr std::uintptr_t launch_param_end = 0x00;
inline constexpr std::uintptr_t launch_param_buffer_pointer = 0x01;
inline constexpr std::uintptr_t launch_param_buffer_size = 0x02;

// Size of the packed block: the end of the last parameter (0 for no parameters).
[[nodiscard]] std::size_t packed_size(std::span<const param_slot> layout) noexcept;

// kernelParams form. Throws sublinear::config_error naming the parameter when
// kernel_params (with a non-empty layout) or one of its entries is null.
void pack_kernel_params(std::span<const param_slot> layout, void* const* kernel_params,
                        std::vector<std::byte>& out);

// extra form: (key, value) pairs ending at CU_LAUNCH_PARAM_END or a null key. Throws
// sublinear::config_error for an unknown key, a missing buffer or size, or a buffer size
// above `max_bytes` (CUDA's limit is 32,764 bytes).
void pack_extra(void* const* extra, std::vector<std::byte>& out, std::size_t max_bytes = 32764);

}  // namespace sublinear::tracer
