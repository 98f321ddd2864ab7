// Status names for the VMM interface (device/vmm.hpp).
#include "device/vmm.hpp"

namespace sublinear::device {

const char* to_string(vmm_status status) noexcept {
  switch (status) {
    case vmm_status::ok:
      return "ok";
    case vmm_status::out_of_memory:
      return "out_of_memory";
    case vmm_status::invalid_argument:
      return "invalid_argument";
    case vmm_status::no_device:
      return "no_device";
    case vmm_status::device_error:
      return "device_error";
  }
  return "unknown vmm_status";
}

}  // namespace sublinear::device
