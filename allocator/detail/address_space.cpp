#include "allocator/detail/address_space.hpp"

#include <iterator>

#include "common/round_up.hpp"
#include "common/text.hpp"

namespace sublinear::allocator::detail {

address_space::address_space(context& ctx)
    : device_(ctx.device),
      size_(round_up(ctx.opts.reserve == 0 ? 2 * ctx.physical_capacity : ctx.opts.reserve, ctx.granularity)) {
  void* base = nullptr;
  if (vmm_status s = device_.reserve(size_, &base); s != vmm_status::ok) {
    throw out_of_memory("sublinear: cannot reserve " + format_bytes(size_) + " of address space on the " +
                            device_.name() + " device (" + to_string(s) + ": " + device_.last_error() +
                            "); set a smaller options.reserve",
                        {size_, 0, 0, ctx.st.budget, 0, out_of_memory::cause::address_space});
  }
  base_ = static_cast<char*>(base);
  free_.emplace(base_, size_);
}

address_space::~address_space() { device_.release(base_, size_); }

char* address_space::take(std::size_t size) {
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    char* base = it->first;
    std::size_t left = it->second - size;
    free_.erase(it);
    if (left > 0) free_.emplace(base + size, left);
    return base;
  }
  return nullptr;
}

void address_space::give(char* base, std::size_t size) {
  auto next = free_.lower_bound(base);
  if (next != free_.end() && base + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == base) {
      prev->second += size;
      return;
    }
  }
  free_.emplace(base, size);
}

}  // namespace sublinear::allocator::detail
