// See Note [Host VMM] in host_vmm.hpp.
#include "common/text.hpp"
#include "device/host/host_vmm.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <system_error>

#include "sublinear/error.hpp"

namespace sublinear::device {

namespace {

// vmm::last_error() is per thread: a failure on one thread must not be overwritten by
// a success or another failure on a different thread before its caller reads it.
// checked_vmm writes its refusals here too.
thread_local std::string host_last_error;

void set_errno_error(const char* what, int err) noexcept {
  try {
    host_last_error = std::string(what) + ": " + std::system_category().message(err);
  } catch (...) {
  }
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels answer EINVAL and are left to fault
#endif

constexpr int reservation_flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

std::size_t page_size() {
  static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

bool is_power_of_two(std::size_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

host_vmm::host_vmm(host_vmm_options options)
    : checked_vmm(options.granularity, options.physical_capacity),
      populate_(options.populate_on_access) {
  const std::size_t granule = granularity();
  const std::size_t capacity = physical_capacity();
  if (!is_power_of_two(granule) || granule % page_size() != 0) {
    throw config_error("host_vmm: granularity " + std::to_string(granule) +
                       " must be a power of two and a multiple of the page size (" +
                       std::to_string(page_size()) + " bytes)");
  }
  if (capacity == 0 || capacity % granule != 0) {
    throw config_error("host_vmm: physical_capacity " + std::to_string(capacity) +
                       " must be a non-zero multiple of the granularity (" +
                       std::to_string(granule) + " bytes)");
  }
  fd_ = ::memfd_create("sublinear-host-vmm", MFD_CLOEXEC);
  if (fd_ < 0) {
    throw device_error("host_vmm: memfd_create failed: " +
                       std::system_category().message(errno));
  }
  // Sparse: no page exists until a mapping touches it.
  if (::ftruncate(fd_, static_cast<off_t>(capacity)) != 0) {
    const int err = errno;
    ::close(fd_);
    throw device_error("host_vmm: ftruncate of the memfd to " + format_bytes(capacity) +
                       " failed: " + std::system_category().message(err));
  }
  free_.emplace(0, capacity);
}

host_vmm::~host_vmm() {
  // Whatever the caller leaked: munmap of a reservation also drops its mappings.
  for (const auto& [base, size] : ledger().reservations()) {
    ::munmap(reinterpret_cast<void*>(base), size);
  }
  ::close(fd_);
}

std::string& host_vmm::last_error_slot() const noexcept { return host_last_error; }

std::size_t host_vmm::resident_bytes() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    throw device_error("host_vmm: fstat of the memfd failed: " +
                       std::system_category().message(errno));
  }
  return static_cast<std::size_t>(st.st_blocks) * 512;
}

bool host_vmm::take_range(std::size_t size, std::size_t* offset) {
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    *offset = it->first;
    const std::size_t rest = it->second - size;
    const std::size_t rest_offset = it->first + size;
    free_.erase(it);
    if (rest != 0) free_.emplace(rest_offset, rest);
    return true;
  }
  return false;
}

void host_vmm::give_back_range(std::size_t offset, std::size_t size) {
  auto next = free_.lower_bound(offset);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && offset + size == next->first) {
    size += next->second;
    free_.erase(next);
  }
  free_.emplace(offset, size);
}

// The hooks below run under checked_vmm's lock, after the ledger has accepted the call
// (Note [Checked VMM]).

vmm_status host_vmm::do_reserve(std::size_t size, void** base) {
  // mmap aligns to pages only: over-reserve by one granule and trim both ends.
  const std::size_t granule = granularity();
  const std::size_t slack = granule - page_size();
  if (size + slack < size) {
    set_error("reserve", "size exceeds the address space");
    return vmm_status::out_of_memory;
  }
  void* raw = ::mmap(nullptr, size + slack, PROT_NONE, reservation_flags, -1, 0);
  if (raw == MAP_FAILED) {
    const int err = errno;
    set_errno_error("reserve: mmap", err);
    return err == ENOMEM ? vmm_status::out_of_memory : vmm_status::device_error;
  }
  const auto raw_begin = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t begin = (raw_begin + granule - 1) & ~(granule - 1);
  const std::size_t head = begin - raw_begin;
  const std::size_t tail = slack - head;
  if (head != 0) ::munmap(raw, head);
  if (tail != 0) ::munmap(reinterpret_cast<void*>(begin + size), tail);
  *base = reinterpret_cast<void*>(begin);
  return vmm_status::ok;
}

void host_vmm::undo_reserve(void* base, std::size_t size) { ::munmap(base, size); }

vmm_status host_vmm::do_release(void* address, std::size_t size) {
  if (::munmap(address, size) != 0) {
    set_errno_error("release: munmap", errno);
    return vmm_status::device_error;
  }
  return vmm_status::ok;
}

vmm_status host_vmm::do_create_chunk(std::size_t size, chunk_handle* handle,
                                     std::uint64_t* backing) {
  std::size_t offset = 0;
  if (!take_range(size, &offset)) {
    const std::size_t capacity = physical_capacity();
    const std::size_t in_use = ledger().chunk_bytes();
    host_last_error = "create_chunk: " + format_bytes(size) + " requested, " +
                      format_bytes(in_use) + " of " + format_bytes(capacity) +
                      " physical capacity in use" +
                      (capacity - in_use >= size ? " (fragmented)" : "");
    return vmm_status::out_of_memory;
  }
  *handle = next_handle_++;
  *backing = offset;
  return vmm_status::ok;
}

void host_vmm::undo_create_chunk(chunk_handle /*handle*/, const chunk_record& chunk) {
  give_back_range(chunk.backing, chunk.size);
}

vmm_status host_vmm::do_release_chunk(chunk_handle /*handle*/, const chunk_record& chunk) {
  // Punching the hole is what gives the pages back; without it the file keeps them
  // until the next chunk that reuses the range overwrites them.
  if (::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>(chunk.backing), static_cast<off_t>(chunk.size)) != 0) {
    set_errno_error("release_chunk: fallocate(PUNCH_HOLE)", errno);
    return vmm_status::device_error;
  }
  return vmm_status::ok;
}

// Should merging run out of memory, the range is lost to this host_vmm, never handed out
// twice: the ledger has forgotten the chunk before this runs.
void host_vmm::chunk_released(const chunk_record& chunk) {
  give_back_range(chunk.backing, chunk.size);
}

vmm_status host_vmm::do_map(void* address, std::size_t size, chunk_handle /*handle*/,
                            const chunk_record& chunk) {
  const auto offset = static_cast<off_t>(chunk.backing);
  void* placed = ::mmap(address, size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd_, offset);
  if (placed == MAP_FAILED) {
    const int err = errno;
    set_errno_error("map: mmap", err);
    // A failed MAP_FIXED may already have removed the old mapping; put the
    // reservation back so the range stays ours.
    ::mmap(address, size, PROT_NONE, reservation_flags | MAP_FIXED, -1, 0);
    return err == ENOMEM ? vmm_status::out_of_memory : vmm_status::device_error;
  }
  return vmm_status::ok;
}

void host_vmm::undo_map(void* address, std::size_t size) {
  ::mmap(address, size, PROT_NONE, reservation_flags | MAP_FIXED, -1, 0);
}

vmm_status host_vmm::do_set_access(void* address, std::size_t size) {
  if (::mprotect(address, size, PROT_READ | PROT_WRITE) != 0) {
    set_errno_error("set_access: mprotect", errno);
    return vmm_status::device_error;
  }
  // Commit the pages and fill the page tables here, on the thread that maps, as a GPU's
  // map call does (Note [Host VMM]). Deliberately unchecked: a failure only means page
  // faults later, in the kernel that first writes the range.
  if (populate_) (void)::madvise(address, size, MADV_POPULATE_READ);
  return vmm_status::ok;
}

// The device's memory is the process's: a copy is a memcpy, once the ledger agrees the
// device side is mapped (a copy into an unmapped range would fault rather than fail).
vmm_status host_vmm::copy(const char* what, void* dst, const void* src, const void* device_side,
                          std::size_t bytes) noexcept {
  return copy_if_mapped(what, device_side, bytes, [&] {
    std::memcpy(dst, src, bytes);
    return vmm_status::ok;
  });
}

vmm_status host_vmm::copy_to_host(void* host, const void* address, std::size_t bytes) noexcept {
  return copy("copy_to_host", host, address, address, bytes);
}

vmm_status host_vmm::copy_to_device(void* address, const void* host, std::size_t bytes) noexcept {
  return copy("copy_to_device", address, host, address, bytes);
}

// Note [Batched unmap]
// Rationale: replacing a mapping that has pages makes the kernel flush that range from
//   the TLB of every core running the process, with an inter-processor interrupt when
//   the stream's worker runs on another core: the interrupt lands on the thread running
//   kernels. The caching allocator completes evictions in batches (every one whose
//   events are done at a poll), and consecutive activations are often adjacent in the
//   reserved range: in `sublinear demo` (ResNet-218 at 0.5x) 2,323 unmaps came in 953
//   batches that held 1,103 contiguous runs.
// Approach: checked_vmm checks every range against the ledger first (nothing is
//   unmapped if one is wrong or two overlap) and hands over the batch in address order;
//   do_unmap puts one PROT_NONE anonymous mapping over each contiguous run: one system
//   call and one flush per run instead of per range. Replacing the file mapping (rather
//   than munmap) keeps the range reserved, so nothing else can be placed there and a
//   stray access faults. unmap() is a batch of one.
// Limitations: only adjacent ranges merge. CUDA's backend gets the batch checked the
//   same way but makes one cuMemUnmap per mapping: whether one call may span several
//   mappings is not relied on.
vmm_status host_vmm::do_unmap(std::span<const vmm_range> sorted, std::size_t* unmapped) noexcept {
  *unmapped = 0;
  for (std::size_t first = 0; first < sorted.size();) {
    std::size_t last = first;
    char* end = static_cast<char*>(sorted[first].address) + sorted[first].size;
    while (last + 1 < sorted.size() && sorted[last + 1].address == end) {
      ++last;
      end += sorted[last].size;
    }
    auto* start = static_cast<char*>(sorted[first].address);
    if (::mmap(start, static_cast<std::size_t>(end - start), PROT_NONE, reservation_flags | MAP_FIXED, -1, 0) ==
        MAP_FAILED) {
      set_errno_error("unmap: mmap", errno);
      return vmm_status::device_error;
    }
    first = last + 1;
    *unmapped = first;
  }
  return vmm_status::ok;
}

}  // namespace sublinear::device
