// The C API's settings entry points (include/sublinear/sublinear.h): the runtime's own
// parser (settings.cpp) answers them, so the Python package and any other caller check a
// value by the rules the runtime reads it with, not by a copy of them.
#include <exception>
#include <string>

#include "allocator/c_api_error.hpp"
#include "runtime/settings.hpp"
#include "sublinear/sublinear.h"

namespace {

std::string setting_names() {
  std::string all;
  for (const auto& o : sublinear::runtime::options_table()) all += (all.empty() ? "" : ", ") + std::string(o.name);
  return all;
}

}  // namespace

extern "C" {

int sublinear_check_setting(const char* name, const char* value) {
  using sublinear::allocator::set_c_api_error;
  if (name == nullptr || value == nullptr) {
    set_c_api_error("sublinear_check_setting: the name and the value must not be NULL");
    return -1;
  }
  try {
    const std::string n(name);
    if (n.rfind("SUBLINEAR_", 0) != 0) {
      set_c_api_error("sublinear: unknown setting " + n + "; the settings are: " + setting_names());
      return -1;
    }
    // The environment holds this one variable: an unknown SUBLINEAR_* name is refused as
    // read_settings refuses it in a real environment, and the build scripts' own variables pass.
    (void)sublinear::runtime::read_settings([&](const char* asked) { return n == asked ? value : nullptr; }, {n});
    return 0;
  } catch (const std::exception& e) {
    set_c_api_error(e.what());
    return -1;
  }
}

int sublinear_setting_info(size_t index, const char** name, const char** forms, int* is_switch) {
  const auto& table = sublinear::runtime::options_table();
  if (index >= table.size()) return -1;
  const auto& o = table[index];
  if (name != nullptr) *name = o.name;
  if (forms != nullptr) *forms = o.forms;
  if (is_switch != nullptr) *is_switch = o.boolean ? 1 : 0;
  return 0;
}

}  // extern "C"
