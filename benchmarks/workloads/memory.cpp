#include "benchmarks/workloads/memory.hpp"

#include <string>
#include <sys/types.h>

#include "sublinear/error.hpp"
#include "sublinear/sublinear.h"

namespace sublinear::workloads {

void* c_api_memory::alloc(std::size_t bytes, host::stream* s) {
  if (bytes == 0) return nullptr;
  void* p = sublinear_alloc(static_cast<ssize_t>(bytes), 0, s);
  if (p != nullptr) return p;
  const std::string why = sublinear_last_error();
  sublinear_stats st{};
  if (sublinear_get_stats(&st) != 0) throw config_error(why);
  // The allocator throws only out_of_memory and config_error, and a request of a valid
  // size with an allocator installed can only fail the first way.
  out_of_memory::figures f;
  f.requested = bytes;
  f.mapped = st.mapped;
  f.reserved = st.reserved;
  f.budget = st.budget;
  throw out_of_memory(why, f);
}

void c_api_memory::free(void* ptr, std::size_t bytes, host::stream* s) {
  sublinear_free(ptr, static_cast<ssize_t>(bytes), 0, s);
}

}  // namespace sublinear::workloads
