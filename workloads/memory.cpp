#include "workloads/memory.hpp"

#include <string>
#include <sys/types.h>

#include "sublinear/error.hpp"
#include "sublinear/sublinear.h"

namespace sublinear::workloads {

void* c_api_memory::alloc(std::size_t bytes, device::host::stream* s) {
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

void c_api_memory::free(void* ptr, std::size_t bytes, device::host::stream* s) {
  sublinear_free(ptr, static_cast<ssize_t>(bytes), 0, s);
}

memory_stats memory::stats() const {
  sublinear_stats s{};
  if (sublinear_get_stats(&s) != 0) return {};
  return memory_stats{static_cast<std::size_t>(s.allocated), static_cast<std::size_t>(s.allocated_peak),
                      static_cast<std::size_t>(s.mapped_peak), static_cast<std::size_t>(s.resident_peak)};
}

void memory::reset_peaks() { sublinear_reset_peaks(); }

void* allocator_memory::alloc(std::size_t bytes, device::host::stream* s) {
  if (bytes == 0) return nullptr;
  return alloc_.allocate(bytes, s);  // throws out_of_memory with the allocator's figures
}

void allocator_memory::free(void* ptr, std::size_t /*bytes*/, device::host::stream* /*s*/) {
  if (ptr != nullptr) alloc_.deallocate(ptr);
}

memory_stats allocator_memory::stats() const {
  const auto s = alloc_.get_stats();
  return memory_stats{s.allocated, s.allocated_peak, s.mapped_peak, s.resident_peak};
}

void allocator_memory::reset_peaks() { alloc_.reset_peaks(); }

}  // namespace sublinear::workloads
