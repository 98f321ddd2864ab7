// The base of the VMM backends: every call checked against the ledger, then handed to
// the backend's platform hook.
//
// Note [Checked VMM]
// Rationale: both backends wrapped each platform call in the same steps (catch
//   bad_alloc, lock, ask the ledger, call the platform, record in the ledger, undo the
//   platform call if recording failed). Written twice, the two copies could drift, and
//   the conformance suite's promise (the same answer from every backend for the same
//   misuse, Note [VMM ledger]) rested on keeping them in step by hand.
// Approach: the template-method pattern. checked_vmm implements the public operations
//   (final) and owns the ledger and the mutex. A backend implements private hooks that
//   only talk to the platform: do_* runs after the ledger has accepted the call and
//   under the lock, sets last_error() and returns a status when the platform refuses;
//   undo_* takes back a platform call the ledger could not record (out of memory);
//   chunk_released runs after the ledger forgot a chunk. do_unmap gets the whole
//   batch, checked and in address order, so a backend may merge adjacent ranges
//   (Note [Batched unmap]); it reports how many it unmapped and the base forgets those.
//   last_error() is per thread and per backend class (last_error_slot), so one
//   backend's failure never shows in the other's.
// Limitations: copy_to_host / copy_to_device are the backend's own: CUDA's driver
//   refuses an unmapped range itself and copies without the lock, while the host's
//   memcpy would fault, so the host checks through copy_if_mapped. The lock is held
//   across the platform call: the checked calls on one VMM are serialized.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <span>
#include <string>

#include "device/vmm.hpp"
#include "device/vmm_ledger.hpp"

namespace sublinear::device {

class checked_vmm : public vmm {
 public:
  ~checked_vmm() override = default;
  checked_vmm(const checked_vmm&) = delete;
  checked_vmm& operator=(const checked_vmm&) = delete;

  [[nodiscard]] std::size_t granularity() const noexcept final { return granularity_; }
  [[nodiscard]] std::size_t physical_capacity() const noexcept final { return capacity_; }

  vmm_status reserve(std::size_t size, void** address) noexcept final;
  vmm_status release(void* address, std::size_t size) noexcept final;
  vmm_status create_chunk(std::size_t size, chunk_handle* handle) noexcept final;
  vmm_status release_chunk(chunk_handle handle) noexcept final;
  vmm_status map(void* address, std::size_t size, chunk_handle handle) noexcept final;
  vmm_status set_access(void* address, std::size_t size) noexcept final;
  // A batch of one.
  vmm_status unmap(void* address, std::size_t size) noexcept final;
  // The whole batch is checked first: one bad or repeated range unmaps nothing.
  vmm_status unmap_ranges(std::span<const vmm_range> ranges) noexcept final;

  [[nodiscard]] std::string last_error() const final { return last_error_slot(); }

  // Bytes of live chunks (what create_chunk has handed out and not taken back).
  [[nodiscard]] std::size_t chunk_bytes_in_use() const;

 protected:
  using chunk_record = detail::vmm_ledger::chunk;

  // `granularity` must be a power of two (a backend validates its own options).
  checked_vmm(std::size_t granularity, std::size_t capacity) noexcept;

  // The record; read it only under the lock: in a hook, or holding lock_ledger().
  [[nodiscard]] const detail::vmm_ledger& ledger() const noexcept { return ledger_; }
  [[nodiscard]] std::unique_lock<std::mutex> lock_ledger() const { return std::unique_lock(mutex_); }

  // "what: why" into last_error; keeps the previous text if that runs out of memory.
  void set_error(const char* what, const char* why) const noexcept;

  // For a backend whose copy would fault rather than fail on an unmapped range: under the
  // lock, refuses (invalid_argument, `what` in last_error) unless every granule of
  // [address, address + bytes) is mapped, then returns copy().
  template <class Copy>
  vmm_status copy_if_mapped(const char* what, const void* address, std::size_t bytes,
                            Copy&& copy) noexcept {
    return guarded(what, [&] {
      const std::lock_guard lock(mutex_);
      if (const char* why = ledger_.check_set_access(address, bytes)) return refuse(what, why);
      return copy();
    });
  }

 private:
  // The platform hooks (Note [Checked VMM]). Each runs under the lock after the ledger
  // has accepted the call; on failure it sets last_error and returns the status. Any but
  // do_unmap may throw std::bad_alloc, which the caller turns into out_of_memory.
  // Reserves `size` bytes aligned to the granularity; the address in *base.
  virtual vmm_status do_reserve(std::size_t size, void** base) = 0;
  virtual void undo_reserve(void* base, std::size_t size) = 0;
  virtual vmm_status do_release(void* address, std::size_t size) = 0;
  // A new chunk: its handle (unknown to the ledger) and the backend's `backing` datum.
  virtual vmm_status do_create_chunk(std::size_t size, chunk_handle* handle,
                                     std::uint64_t* backing) = 0;
  virtual void undo_create_chunk(chunk_handle handle, const chunk_record& chunk) = 0;
  virtual vmm_status do_release_chunk(chunk_handle handle, const chunk_record& chunk) = 0;
  // After the ledger has forgotten the chunk; the release has succeeded by then.
  virtual void chunk_released(const chunk_record& /*chunk*/) {}
  virtual vmm_status do_map(void* address, std::size_t size, chunk_handle handle,
                            const chunk_record& chunk) = 0;
  virtual void undo_map(void* address, std::size_t size) = 0;
  virtual vmm_status do_set_access(void* address, std::size_t size) = 0;
  // `sorted`: a non-empty batch in address order, every range one mapping, none
  // overlapping. Sets *unmapped to how many of its first ranges are gone: all of them
  // when it returns ok, those before the failure otherwise.
  virtual vmm_status do_unmap(std::span<const vmm_range> sorted, std::size_t* unmapped) noexcept = 0;
  // The backend's thread_local text behind last_error().
  [[nodiscard]] virtual std::string& last_error_slot() const noexcept = 0;

  vmm_status refuse(const char* what, const char* why) const noexcept {
    set_error(what, why);
    return vmm_status::invalid_argument;
  }
  // The interface is noexcept and the bookkeeping allocates: an exception becomes a status.
  template <class Fn>
  vmm_status guarded(const char* what, Fn&& fn) const noexcept {
    try {
      return fn();
    } catch (const std::bad_alloc&) {
      set_error(what, "out of host memory for bookkeeping");
      return vmm_status::out_of_memory;
    } catch (...) {
      set_error(what, "unexpected exception");
      return vmm_status::device_error;
    }
  }

  std::size_t granularity_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  detail::vmm_ledger ledger_;
};

}  // namespace sublinear::device
