// Everything a workload needs to run on the host device, set up in one object.
//
// Note [Host session]
// Rationale: the demo, the figures program, the tests and (later) the runtime all need the
//   same stack: a host VMM, a host device, a caching allocator over them with an optional
//   budget, installed as the process default so that sublinear_alloc/sublinear_free (the
//   entry points a framework calls) reach it. Building it by hand in each place invites
//   teardown-order bugs.
// Approach: members are declared in dependency order (VMM, device, allocator, the default
//   installation, the C-entry-point memory), so they are destroyed in reverse: the
//   default is uninstalled before the allocator dies, and the allocator (which may wait on
//   events for deferred unmaps) dies before the device. The destructor first drains every
//   stream, so no queued kernel outlives the memory it touches.
// Limitations: one installing session at a time per process (the default allocator is a
//   single slot; a nested session shadows the outer one until it ends); sessions with
//   install_default = false do not touch the slot and may coexist. Not copyable or movable:
//   the allocator holds references to the VMM and the device.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include "allocator/caching_allocator.hpp"
#include "allocator/default_allocator.hpp"
#include "device/host/device.hpp"
#include "device/host/host_vmm.hpp"
#include "workloads/context.hpp"
#include "workloads/memory.hpp"

namespace sublinear::workloads {

struct host_session_options {
  // Strict limit on mapped physical bytes (allocator::options::budget); 0: the capacity.
  std::size_t budget = 0;
  // Physical memory the host device pretends to have (sparse: only touched pages cost RAM).
  std::size_t physical_capacity = std::size_t{16} << 30;
  // VMM granularity (CUDA's is 2 MiB; smaller keeps small workloads' figures meaningful).
  std::size_t granularity = std::size_t{64} << 10;
  // Run every device operation on the calling thread (debugging).
  bool synchronous = false;
  // PyTorch's size classes scaled down for host-sized models (Note [Host size classes]).
  bool scaled_size_classes = false;
  // Every segment one page (`granularity`), so mapped bytes follow live bytes: tests whose
  // models hold a few MiB use it to leave room for budgets below the traced peak.
  bool page_segments = false;
  // Install the allocator as the process default, so that sublinear_alloc/sublinear_free
  // reach it and memory() goes through them. Off, memory() calls the allocator directly
  // and the session leaves the default slot alone: several such sessions may run side by
  // side, each on its own thread (remat_sweeps' paired timing).
  bool install_default = true;
};

class host_session {
 public:
  explicit host_session(host_session_options options = {});
  ~host_session();
  host_session(const host_session&) = delete;
  host_session& operator=(const host_session&) = delete;

  [[nodiscard]] device::host::device& device() noexcept { return device_; }
  [[nodiscard]] allocator::caching_allocator& allocator() noexcept { return allocator_; }
  [[nodiscard]] device::host_vmm& vmm() noexcept { return vmm_; }
  // Memory served by allocator(): through sublinear_alloc / sublinear_free when the
  // session installed it as the default, directly otherwise.
  [[nodiscard]] workloads::memory& memory() noexcept { return *memory_; }
  // An op context on `s` (nullptr: the default stream) using memory().
  [[nodiscard]] context make_context(device::host::stream* s = nullptr) { return context{device_, s, *memory_}; }

 private:
  device::host_vmm vmm_;
  device::host::device device_;
  allocator::caching_allocator allocator_;
  std::optional<allocator::scoped_default_allocator> installed_;
  std::unique_ptr<workloads::memory> memory_;
};

}  // namespace sublinear::workloads
