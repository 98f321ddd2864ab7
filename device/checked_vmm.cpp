// See Note [Checked VMM] in checked_vmm.hpp.
#include "device/checked_vmm.hpp"

#include <algorithm>
#include <vector>

namespace sublinear::device {

checked_vmm::checked_vmm(std::size_t granularity, std::size_t capacity) noexcept
    : granularity_(granularity), capacity_(capacity), ledger_(granularity) {}

void checked_vmm::set_error(const char* what, const char* why) const noexcept {
  try {
    last_error_slot() = std::string(what) + ": " + why;
  } catch (...) {
    // Out of memory while describing a failure: keep the previous text.
  }
}

std::size_t checked_vmm::chunk_bytes_in_use() const {
  const std::lock_guard lock(mutex_);
  return ledger_.chunk_bytes();
}

vmm_status checked_vmm::reserve(std::size_t size, void** address) noexcept {
  return guarded("reserve", [&] {
    if (address == nullptr) return refuse("reserve", "address out-parameter is null");
    const std::lock_guard lock(mutex_);
    if (const char* why = ledger_.check_reserve(size)) return refuse("reserve", why);
    void* base = nullptr;
    if (const vmm_status s = do_reserve(size, &base); s != vmm_status::ok) return s;
    try {
      ledger_.add_reservation(base, size);
    } catch (...) {
      undo_reserve(base, size);
      throw;
    }
    *address = base;
    return vmm_status::ok;
  });
}

vmm_status checked_vmm::release(void* address, std::size_t size) noexcept {
  return guarded("release", [&] {
    const std::lock_guard lock(mutex_);
    if (const char* why = ledger_.check_release(address, size)) return refuse("release", why);
    if (const vmm_status s = do_release(address, size); s != vmm_status::ok) return s;
    ledger_.remove_reservation(address);
    return vmm_status::ok;
  });
}

vmm_status checked_vmm::create_chunk(std::size_t size, chunk_handle* handle) noexcept {
  return guarded("create_chunk", [&] {
    if (handle == nullptr) return refuse("create_chunk", "handle out-parameter is null");
    const std::lock_guard lock(mutex_);
    if (const char* why = ledger_.check_create_chunk(size)) return refuse("create_chunk", why);
    chunk_handle h = 0;
    std::uint64_t backing = 0;
    if (const vmm_status s = do_create_chunk(size, &h, &backing); s != vmm_status::ok) return s;
    try {
      ledger_.add_chunk(h, size, backing);
    } catch (...) {
      undo_create_chunk(h, chunk_record{size, backing, 0});
      throw;
    }
    *handle = h;
    return vmm_status::ok;
  });
}

vmm_status checked_vmm::release_chunk(chunk_handle handle) noexcept {
  return guarded("release_chunk", [&] {
    const std::lock_guard lock(mutex_);
    // CUDA would release a mapped chunk (it counts references); the interface does not,
    // so that misuse is caught here, for every backend.
    if (const char* why = ledger_.check_release_chunk(handle)) return refuse("release_chunk", why);
    const chunk_record chunk = *ledger_.find_chunk(handle);
    if (const vmm_status s = do_release_chunk(handle, chunk); s != vmm_status::ok) return s;
    ledger_.remove_chunk(handle);
    chunk_released(chunk);
    return vmm_status::ok;
  });
}

vmm_status checked_vmm::map(void* address, std::size_t size, chunk_handle handle) noexcept {
  return guarded("map", [&] {
    const std::lock_guard lock(mutex_);
    if (const char* why = ledger_.check_map(address, size, handle)) return refuse("map", why);
    if (const vmm_status s = do_map(address, size, handle, *ledger_.find_chunk(handle));
        s != vmm_status::ok) {
      return s;
    }
    try {
      ledger_.add_mapping(address, size, handle);
    } catch (...) {
      undo_map(address, size);
      throw;
    }
    return vmm_status::ok;
  });
}

vmm_status checked_vmm::set_access(void* address, std::size_t size) noexcept {
  return guarded("set_access", [&] {
    const std::lock_guard lock(mutex_);
    if (const char* why = ledger_.check_set_access(address, size)) return refuse("set_access", why);
    return do_set_access(address, size);
  });
}

vmm_status checked_vmm::unmap(void* address, std::size_t size) noexcept {
  const vmm_range one[] = {{address, size}};
  return unmap_ranges(one);
}

vmm_status checked_vmm::unmap_ranges(std::span<const vmm_range> ranges) noexcept {
  return guarded("unmap", [&] {
    const std::lock_guard lock(mutex_);
    std::vector<vmm_range> sorted(ranges.begin(), ranges.end());
    std::sort(sorted.begin(), sorted.end(),
              [](const vmm_range& a, const vmm_range& b) { return a.address < b.address; });
    if (const char* why = ledger_.check_unmap_ranges(sorted)) return refuse("unmap", why);
    if (sorted.empty()) return vmm_status::ok;
    std::size_t unmapped = 0;
    const vmm_status s = do_unmap(sorted, &unmapped);
    const std::size_t gone = s == vmm_status::ok ? sorted.size() : std::min(unmapped, sorted.size());
    for (std::size_t i = 0; i < gone; ++i) ledger_.remove_mapping(sorted[i].address);
    return s;
  });
}

}  // namespace sublinear::device
