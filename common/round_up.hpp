// Rounding to a multiple: page granularities, allocation classes, pack footprints.
#pragma once

#include <cstddef>

namespace sublinear {

// The smallest multiple of `unit` that is >= `bytes`; `unit` 0 or 1 leaves `bytes` as it is.
[[nodiscard]] constexpr std::size_t round_up(std::size_t bytes, std::size_t unit) noexcept {
  return unit <= 1 ? bytes : (bytes + unit - 1) / unit * unit;
}

}  // namespace sublinear
