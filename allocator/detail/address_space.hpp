// The reserved virtual range: reserved once, handed out to segments in pieces.
//
// Note [Address space]
// Rationale: a block's address must stay the same while its pages come and go (Note
//   [Evictable blocks]): the replay engine regenerates an evicted activation at the
//   address its recorded kernels use. Addresses cost nothing until pages are mapped
//   behind them, so one range reserved up front serves every segment.
// Approach: one range (options::reserve, 2x the physical capacity by default) is reserved
//   when the allocator is made and released when it goes. Its free pieces sit in a map
//   by base address; a new segment takes the lowest piece large enough (first fit) and a
//   released segment's range goes back, merged with free neighbours. A handed-off chunk's
//   old address comes back only once its old mapping is unmapped (Note [Stream-ordered
//   handoff]); a trimmed hole's at once (Note [Segment trim]).
// Limitations: the range never grows: a request that finds no free piece is an
//   out_of_memory naming the address space, whatever the budget.
#pragma once

#include <cstddef>
#include <map>

#include "allocator/detail/context.hpp"

namespace sublinear::allocator::detail {

class address_space {
 public:
  // Reserves the range; throws out_of_memory if the device refuses it.
  explicit address_space(context& ctx);
  // Releases the range. Precondition: nothing in it is mapped.
  ~address_space();
  address_space(const address_space&) = delete;
  address_space& operator=(const address_space&) = delete;

  // The lowest free piece of `size` bytes, or nullptr if there is none.
  [[nodiscard]] char* take(std::size_t size);
  // Gives a piece back, merging it with free neighbours.
  void give(char* base, std::size_t size);

  [[nodiscard]] bool contains(const char* base, std::size_t size) const noexcept {
    return base >= base_ && base + size <= base_ + size_;
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  vmm& device_;
  char* base_ = nullptr;
  std::size_t size_ = 0;
  std::map<char*, std::size_t> free_;  // free pieces: base -> size
};

}  // namespace sublinear::allocator::detail
