// The error hierarchy. Out-of-memory is distinct from every other failure so callers
// (the runtime, a framework's OOM handler) can react to it alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "sublinear/export.h"

namespace sublinear {

class SUBLINEAR_API error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A setting, argument or input that cannot be used as given.
class SUBLINEAR_API config_error : public error {
 public:
  using error::error;
};

// The device layer failed (driver missing, a VMM call failed for a reason other than OOM).
class SUBLINEAR_API device_error : public error {
 public:
  using error::error;
};

// A request that would exceed the budget or the device's physical memory.
class SUBLINEAR_API out_of_memory : public error {
 public:
  // What ran out. Only a budget shortfall can be met by giving the budget up; the device's
  // memory or the reserved address space cannot (the replay engine's overrun handler
  // tells them apart by this).
  enum class cause : std::uint8_t { budget, device_memory, address_space, unknown };
  struct figures {
    std::size_t requested = 0;
    std::size_t mapped = 0;
    std::size_t reserved = 0;
    std::size_t budget = 0;
    std::size_t largest_free_block = 0;
    cause ran_out = cause::unknown;
  };
  out_of_memory(const std::string& what, const figures& f) : error(what), figures_(f) {}
  [[nodiscard]] const figures& details() const noexcept { return figures_; }

 private:
  figures figures_;
};

}  // namespace sublinear
