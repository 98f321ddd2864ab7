// See Note [VMM ledger] in vmm_ledger.hpp.
#include "device/vmm_ledger.hpp"

namespace sublinear::device::detail {

namespace {

std::uintptr_t to_uint(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace

vmm_ledger::vmm_ledger(std::size_t granularity) noexcept : granularity_(granularity) {}

const char* vmm_ledger::check_range(const void* address, std::size_t size) const noexcept {
  const std::uintptr_t begin = to_uint(address);
  if (begin == 0) return "address is null";
  if (size == 0) return "size is zero";
  if (!aligned(begin)) return "address is not a multiple of the granularity";
  if (!aligned(size)) return "size is not a multiple of the granularity";
  if (begin + size < begin) return "range wraps around the address space";
  return nullptr;
}

std::map<std::uintptr_t, std::size_t>::const_iterator vmm_ledger::reservation_holding(
    std::uintptr_t begin, std::uintptr_t end) const noexcept {
  auto it = reservations_.upper_bound(begin);
  if (it == reservations_.begin()) return reservations_.end();
  --it;
  if (end > it->first + it->second) return reservations_.end();
  return it;
}

bool vmm_ledger::any_mapping_in(std::uintptr_t begin, std::uintptr_t end) const noexcept {
  auto it = mappings_.lower_bound(begin);
  if (it != mappings_.end() && it->first < end) return true;
  if (it == mappings_.begin()) return false;
  --it;
  return it->first + it->second.size > begin;
}

const char* vmm_ledger::check_reserve(std::size_t size) const noexcept {
  if (size == 0) return "size is zero";
  if (!aligned(size)) return "size is not a multiple of the granularity";
  return nullptr;
}

const char* vmm_ledger::check_release(const void* address, std::size_t size) const noexcept {
  if (const char* why = check_range(address, size)) return why;
  const auto it = reservations_.find(to_uint(address));
  if (it == reservations_.end()) return "address is not the start of a reservation";
  if (it->second != size) return "size is not the size of the reservation";
  if (any_mapping_in(it->first, it->first + it->second)) {
    return "the reservation still has live mappings";
  }
  return nullptr;
}

const char* vmm_ledger::check_create_chunk(std::size_t size) const noexcept {
  if (size == 0) return "size is zero";
  if (!aligned(size)) return "size is not a multiple of the granularity";
  return nullptr;
}

const char* vmm_ledger::check_release_chunk(chunk_handle handle) const noexcept {
  const auto it = chunks_.find(handle);
  if (it == chunks_.end()) return "unknown chunk handle";
  if (it->second.mappings != 0) return "the chunk is still mapped";
  return nullptr;
}

const char* vmm_ledger::check_map(const void* address, std::size_t size,
                                  chunk_handle handle) const noexcept {
  if (const char* why = check_range(address, size)) return why;
  const auto chunk_it = chunks_.find(handle);
  if (chunk_it == chunks_.end()) return "unknown chunk handle";
  if (chunk_it->second.size != size) return "size is not the size of the chunk";
  const std::uintptr_t begin = to_uint(address);
  if (reservation_holding(begin, begin + size) == reservations_.end()) {
    return "range is not inside one reservation";
  }
  if (any_mapping_in(begin, begin + size)) return "range overlaps a live mapping";
  return nullptr;
}

const char* vmm_ledger::check_set_access(const void* address, std::size_t size) const noexcept {
  if (const char* why = check_range(address, size)) return why;
  // Every granule of the range must be mapped; the range may span adjacent mappings.
  const std::uintptr_t end = to_uint(address) + size;
  std::uintptr_t cursor = to_uint(address);
  auto it = mappings_.upper_bound(cursor);
  if (it == mappings_.begin()) return "range is not mapped";
  --it;
  while (cursor < end) {
    if (it == mappings_.end() || it->first > cursor || it->first + it->second.size <= cursor) {
      return "range is not mapped";
    }
    cursor = it->first + it->second.size;
    ++it;
  }
  return nullptr;
}

const char* vmm_ledger::check_unmap(const void* address, std::size_t size) const noexcept {
  if (const char* why = check_range(address, size)) return why;
  const auto it = mappings_.find(to_uint(address));
  if (it == mappings_.end()) return "address is not the start of a mapping";
  if (it->second.size != size) return "size is not the size of the mapping (no partial unmap)";
  return nullptr;
}

const char* vmm_ledger::check_unmap_ranges(std::span<const vmm_range> sorted) const noexcept {
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (const char* why = check_unmap(sorted[i].address, sorted[i].size)) return why;
    if (i > 0 && to_uint(sorted[i - 1].address) + sorted[i - 1].size > to_uint(sorted[i].address)) {
      return "two of the ranges overlap";
    }
  }
  return nullptr;
}

void vmm_ledger::add_reservation(const void* address, std::size_t size) {
  reservations_.emplace(to_uint(address), size);
}

void vmm_ledger::remove_reservation(const void* address) noexcept {
  reservations_.erase(to_uint(address));
}

void vmm_ledger::add_chunk(chunk_handle handle, std::size_t size, std::uint64_t backing) {
  chunks_.emplace(handle, chunk{size, backing, 0});
  chunk_bytes_ += size;
}

void vmm_ledger::remove_chunk(chunk_handle handle) noexcept {
  const auto it = chunks_.find(handle);
  if (it == chunks_.end()) return;
  chunk_bytes_ -= it->second.size;
  chunks_.erase(it);
}

void vmm_ledger::add_mapping(const void* address, std::size_t size, chunk_handle handle) {
  mappings_.emplace(to_uint(address), mapping{size, handle});
  ++chunks_.at(handle).mappings;
  mapped_bytes_ += size;
}

chunk_handle vmm_ledger::remove_mapping(const void* address) noexcept {
  const auto it = mappings_.find(to_uint(address));
  if (it == mappings_.end()) return 0;
  const mapping m = it->second;
  mappings_.erase(it);
  mapped_bytes_ -= m.size;
  if (const auto c = chunks_.find(m.handle); c != chunks_.end()) --c->second.mappings;
  return m.handle;
}

const vmm_ledger::chunk* vmm_ledger::find_chunk(chunk_handle handle) const noexcept {
  const auto it = chunks_.find(handle);
  return it == chunks_.end() ? nullptr : &it->second;
}

}  // namespace sublinear::device::detail
