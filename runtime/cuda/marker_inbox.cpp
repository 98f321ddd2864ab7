// See Note [Marker inbox] in marker_inbox.hpp.
#include "runtime/cuda/marker_inbox.hpp"

namespace sublinear::runtime {

namespace {
thread_local int t_engine_depth = 0;
}  // namespace

marker_inbox::engine_scope::engine_scope() noexcept { ++t_engine_depth; }
marker_inbox::engine_scope::~engine_scope() { --t_engine_depth; }

marker_inbox::marker_inbox(std::function<void()> deliver)
    : deliver_(std::move(deliver)), previous_(tracer::set_default_recorder(&inbox_)) {}

marker_inbox::~marker_inbox() {
  // Only if it is still ours: someone may have installed another one since.
  if (tracer::default_recorder() == &inbox_) tracer::set_default_recorder(previous_);
}

void marker_inbox::poll() {
  if (t_engine_depth > 0 || inbox_.event_count() == 0) return;
  const tracer::trace arrived = inbox_.take();
  for (const tracer::event& e : arrived.events) {
    if (e.kind != tracer::event_kind::marker) continue;
    const engine_scope scope;
    deliver_();
  }
}

bool marker_inbox::place_evictable(std::size_t size, device::stream_handle stream) {
  poll();
  return next_ != nullptr && next_->place_evictable(size, stream);
}

std::optional<allocator::pack_slot> marker_inbox::pack_slot_for(std::size_t size, device::stream_handle stream) {
  // No poll: place_evictable polled for this very allocation just before.
  return next_ != nullptr ? next_->pack_slot_for(size, stream) : std::nullopt;
}

void marker_inbox::on_allocate(void* ptr, std::size_t size, device::stream_handle stream, bool evictable) {
  poll();
  if (next_ != nullptr) next_->on_allocate(ptr, size, stream, evictable);
}

bool marker_inbox::defer_free(void* ptr, std::size_t size, device::stream_handle stream) {
  poll();
  return next_ != nullptr && next_->defer_free(ptr, size, stream);
}

void marker_inbox::on_free(void* ptr, std::size_t size, device::stream_handle stream) {
  poll();
  if (next_ != nullptr) next_->on_free(ptr, size, stream);
}

}  // namespace sublinear::runtime
