// The thread's last error of the C API (sublinear_last_error in include/sublinear/sublinear.h),
// for C entry points defined in higher layers (runtime/settings_c_api.cpp).
#pragma once

#include <string>

namespace sublinear::allocator {

void set_c_api_error(const std::string& text) noexcept;

}  // namespace sublinear::allocator
