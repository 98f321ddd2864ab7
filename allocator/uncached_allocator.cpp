#include "allocator/uncached_allocator.hpp"

#include <cstdio>
#include <string>

#include "common/text.hpp"
#include "sublinear/error.hpp"

namespace sublinear::allocator {

uncached_allocator::uncached_allocator(vmm& device, std::size_t budget)
    : device_(device), budget_(budget == 0 ? device.physical_capacity() : budget) {}

uncached_allocator::~uncached_allocator() {
  for (auto& [ptr, m] : live_) {
    device_.unmap(ptr, m.size);
    device_.release_chunk(m.handle);
    device_.release(ptr, m.size);
  }
}

void* uncached_allocator::allocate(std::size_t size) {
  if (size == 0) return nullptr;
  const std::size_t g = device_.granularity();
  const std::size_t bytes = (size + g - 1) / g * g;
  std::lock_guard lock(mutex_);
  auto oom = [&](out_of_memory::cause ran_out, const std::string& why) {
    throw out_of_memory("sublinear (uncached): out of memory: " + why + "; requested " + format_bytes(size) +
                            ", mapped " + format_bytes(mapped_) + ", budget " + format_bytes(budget_),
                        {size, mapped_, mapped_, budget_, 0, ran_out});
  };
  if (mapped_ + bytes > budget_) oom(out_of_memory::cause::budget, "the budget would be exceeded");
  void* va = nullptr;
  if (device_.reserve(bytes, &va) != vmm_status::ok)
    oom(out_of_memory::cause::address_space, "no address space: " + device_.last_error());
  chunk_handle h = 0;
  if (vmm_status s = device_.create_chunk(bytes, &h); s != vmm_status::ok) {
    device_.release(va, bytes);
    oom(s == vmm_status::out_of_memory ? out_of_memory::cause::device_memory : out_of_memory::cause::unknown,
        std::string(to_string(s)) + ": " + device_.last_error());
  }
  if (device_.map(va, bytes, h) != vmm_status::ok || device_.set_access(va, bytes) != vmm_status::ok) {
    std::string why = device_.last_error();
    device_.unmap(va, bytes);
    device_.release_chunk(h);
    device_.release(va, bytes);
    throw device_error("sublinear (uncached): mapping failed: " + why);
  }
  live_.emplace(static_cast<char*>(va), mapping{bytes, h});
  mapped_ += bytes;
  return va;
}

void uncached_allocator::deallocate(void* ptr) noexcept {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(static_cast<char*>(ptr));
  if (it == live_.end()) {
    std::fprintf(stderr, "sublinear (uncached): free of unknown pointer %p ignored\n", ptr);
    return;
  }
  device_.unmap(ptr, it->second.size);
  device_.release_chunk(it->second.handle);
  device_.release(ptr, it->second.size);
  mapped_ -= it->second.size;
  live_.erase(it);
}

std::size_t uncached_allocator::mapped() const {
  std::lock_guard lock(mutex_);
  return mapped_;
}

}  // namespace sublinear::allocator
