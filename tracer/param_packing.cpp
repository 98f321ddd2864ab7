// Normalizing launch forms (Note [Packed parameters] in param_packing.hpp).
#include "tracer/param_packing.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "sublinear/error.hpp"

namespace sublinear::tracer {

std::size_t packed_size(std::span<const param_slot> layout) noexcept {
  std::size_t end = 0;
  for (const param_slot& p : layout) end = std::max<std::size_t>(end, std::size_t{p.offset} + p.size);
  return end;
}

void pack_kernel_params(std::span<const param_slot> layout, void* const* kernel_params,
                        std::vector<std::byte>& out) {
  out.assign(packed_size(layout), std::byte{0});
  if (layout.empty()) return;
  if (kernel_params == nullptr) {
    throw config_error("launch parameters: kernelParams is null for a kernel with " +
                       std::to_string(layout.size()) + " parameters");
  }
  for (std::size_t i = 0; i < layout.size(); ++i) {
    if (kernel_params[i] == nullptr) {
      throw config_error("launch parameters: kernelParams[" + std::to_string(i) + "] is null");
    }
    std::memcpy(out.data() + layout[i].offset, kernel_params[i], layout[i].size);
  }
}

void pack_extra(void* const* extra, std::vector<std::byte>& out, std::size_t max_bytes) {
  out.clear();
  if (extra == nullptr) return;
  const void* buffer = nullptr;
  const std::size_t* size = nullptr;
  for (std::size_t i = 0;; i += 2) {
    const auto key = reinterpret_cast<std::uintptr_t>(extra[i]);
    if (key == launch_param_end) break;
    if (key == launch_param_buffer_pointer) {
      buffer = extra[i + 1];
    } else if (key == launch_param_buffer_size) {
      size = static_cast<const std::size_t*>(extra[i + 1]);
    } else {
      throw config_error("launch parameters: unknown key " + std::to_string(key) + " at extra[" +
                         std::to_string(i) + "]");
    }
  }
  if (buffer == nullptr && size == nullptr) return;
  if (buffer == nullptr || size == nullptr) {
    throw config_error(std::string("launch parameters: extra gives a buffer ") +
                       (buffer == nullptr ? "size but no pointer" : "pointer but no size"));
  }
  if (*size > max_bytes) {
    throw config_error("launch parameters: extra buffer of " + std::to_string(*size) +
                       " bytes exceeds the limit of " + std::to_string(max_bytes));
  }
  const auto* bytes = static_cast<const std::byte*>(buffer);
  out.assign(bytes, bytes + *size);
}

}  // namespace sublinear::tracer
