// stream_events implementations for allocator tests that need events to stay pending
// for a while: the allocator's deferred paths must work whatever the device's timing.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "device/stream_events.hpp"

namespace sublinear::testing {

// Events complete only when the test says so (complete_all), or when synchronized.
class manual_events final : public device::stream_events {
 public:
  device::event_handle record(device::stream_handle) override {
    std::lock_guard lock(mutex_);
    auto id = ++next_;
    done_[id] = false;
    ++recorded_;
    return reinterpret_cast<device::event_handle>(id);
  }
  bool query(device::event_handle e) override {
    std::lock_guard lock(mutex_);
    return done_.at(key(e));
  }
  void synchronize(device::event_handle e) override {
    std::lock_guard lock(mutex_);
    done_.at(key(e)) = true;
    ++synchronized_;
  }
  void release(device::event_handle e) noexcept override {
    std::lock_guard lock(mutex_);
    done_.erase(key(e));
  }
  void complete_all() {
    std::lock_guard lock(mutex_);
    for (auto& [id, done] : done_) done = true;
  }
  std::size_t outstanding() const {
    std::lock_guard lock(mutex_);
    return done_.size();
  }
  std::uint64_t recorded() const { return recorded_; }
  std::uint64_t synchronized() const { return synchronized_; }

 private:
  static std::uintptr_t key(device::event_handle e) { return reinterpret_cast<std::uintptr_t>(e); }
  mutable std::mutex mutex_;
  std::uintptr_t next_ = 0;
  std::unordered_map<std::uintptr_t, bool> done_;
  std::atomic<std::uint64_t> recorded_{0}, synchronized_{0};
};

// Each event completes after it has been queried `delay` times: work that finishes
// "a little later", deterministically.
class countdown_events final : public device::stream_events {
 public:
  explicit countdown_events(int delay) : delay_(delay) {}
  device::event_handle record(device::stream_handle) override {
    return new std::atomic<int>(delay_);
  }
  bool query(device::event_handle e) override {
    auto* left = static_cast<std::atomic<int>*>(e);
    return left->load() <= 0 || left->fetch_sub(1) <= 1;
  }
  void synchronize(device::event_handle e) override { static_cast<std::atomic<int>*>(e)->store(0); }
  void release(device::event_handle e) noexcept override { delete static_cast<std::atomic<int>*>(e); }

 private:
  int delay_;
};

}  // namespace sublinear::testing
