#include "allocator/detail/budget_ladder.hpp"

#include <memory>
#include <utility>

#include "common/text.hpp"

namespace sublinear::allocator::detail {

budget_ladder::budget_ladder(context& ctx, address_space& space, chunk_source& chunks, block_pool& pool,
                             segment_table& segments, segment_trim& trim)
    : ctx_(ctx), space_(space), chunks_(chunks), pool_(pool), segments_(segments), trim_(trim) {}

// Finds a chunk of exactly `bytes` whose last use is queued on `stream` and nowhere else,
// and sets it aside for the next mapping: a wholly free cached segment's. Never a pending
// eviction's: its address would show the new owner's bytes while the block is evicted
// (Note [Stream-ordered handoff]). Returns false if none.
bool budget_ladder::hand_off(std::size_t bytes, std::optional<stream_handle> stream) {
  if (!ctx_.opts.stream_ordered_handoff || !stream || bytes == 0 || chunks_.holding_handoff()) return false;
  return segments_.hand_off(bytes, *stream);
}

bool budget_ladder::make_room(std::size_t bytes, std::optional<stream_handle> stream) {
  // One left by a request that failed before mapping it serves only its own size and stream.
  chunks_.keep_handoff_for(bytes, stream);
  if (chunks_.ready(bytes)) return true;
  work_->poll();
  if (chunks_.ready(bytes) || hand_off(bytes, stream)) return true;
  // Pooled chunks first, then cached segments, then the chunks their release pooled.
  const auto give_back = [&] {
    if (chunks_.ready(bytes)) return true;
    chunks_.trim(bytes, bytes);
    if (ctx_.fits(bytes)) return true;
    segments_.release_cached(bytes, false, bytes);
    if (chunks_.ready(bytes)) return true;
    chunks_.trim(bytes, bytes);
    return ctx_.fits(bytes);
  };
  if (give_back()) return true;
  if (work_->pending() || chunks_.has_orphans()) {
    ++ctx_.st.budget_waits;
    work_->wait();
    if (chunks_.has_orphans()) chunks_.settle_all();
    if (give_back()) return true;
  }
  if (ctx_.opts.trim_segments && trim_.cut_holes(bytes)) return true;
  last_shortfall_ = ctx_.st.mapped + bytes - ctx_.st.budget;
  return false;
}

void budget_ladder::throw_oom(std::size_t requested, out_of_memory::cause ran_out, const std::string& why) {
  stats& st = ctx_.st;
  ++st.oom_errors;
  out_of_memory::figures f{requested, st.mapped, st.reserved, st.budget, pool_.largest_free(), ran_out};
  throw out_of_memory("sublinear: out of memory: " + why + ". Requested " + format_bytes(requested) + "; mapped " +
                          format_bytes(f.mapped) + ", reserved " + format_bytes(f.reserved) + ", budget " +
                          format_bytes(f.budget) + ", largest free block " + format_bytes(f.largest_free_block) +
                          ". Raise the budget, or free or evict memory before this allocation.",
                      f);
}

vmm_status budget_ladder::map_segment(segment& seg) {
  chunk_handle handle = 0;
  const vmm_status s = chunks_.map(seg.base, seg.size, handle);
  if (s == vmm_status::ok) {
    seg.handle = handle;
    seg.mapped = true;
  }
  return s;
}

void budget_ladder::map(segment& seg, std::size_t requested, std::optional<stream_handle> stream) {
  if (!make_room(seg.size, stream))
    throw_oom(requested, out_of_memory::cause::budget, "mapping " + format_bytes(seg.size) + " would exceed the budget");
  vmm_status s = map_segment(seg);
  if (s == vmm_status::out_of_memory) {
    segments_.release_cached(0, true);
    work_->wait_evictions();
    chunks_.empty_pool();
    s = map_segment(seg);
  }
  if (s == vmm_status::out_of_memory)
    throw_oom(requested, out_of_memory::cause::device_memory,
              "the " + ctx_.device.name() + " device has no physical memory left");
  if (s != vmm_status::ok) throw ctx_.device_failure("mapping " + format_bytes(seg.size), s);
}

block* budget_ladder::new_segment(std::size_t size, pool_kind kind, stream_handle stream, std::size_t requested) {
  char* base = space_.take(size);
  if (base == nullptr) {
    chunks_.orphan_handoff();  // make_room may have set one aside for this segment
    throw_oom(requested, out_of_memory::cause::address_space,
              "the reserved address space (" + format_bytes(space_.size()) + ") has no free range of " +
                  format_bytes(size) + "; set a larger options.reserve");
  }
  auto seg = std::make_unique<segment>();
  seg->base = base;
  seg->size = size;
  seg->kind = kind;
  seg->stream = stream;
  try {
    map(*seg, requested, stream);
  } catch (...) {
    space_.give(base, size);
    throw;
  }
  return segments_.add(std::move(seg));
}

block* budget_ladder::dedicated_segment(std::size_t bytes, stream_handle stream, std::size_t requested) {
  if (block* b = pool_.take_exact(stream, pool_kind::dedicated, bytes); b != nullptr) return b;
  return new_segment(bytes, pool_kind::dedicated, stream, requested);
}

void budget_ladder::set_budget(std::size_t bytes) {
  std::size_t budget = bytes == 0 ? ctx_.physical_capacity : bytes;
  std::size_t old = ctx_.st.budget;
  ctx_.st.budget = budget;
  chunks_.empty_pool();  // a new plan, new sizes: the pool starts empty (Note [Chunk pool])
  if (!make_room(0)) {
    ctx_.st.budget = old;
    throw_oom(0, out_of_memory::cause::budget,
              "the new budget of " + format_bytes(budget) + " is below what is mapped and cannot be freed");
  }
}

void budget_ladder::with_pressure_valve(std::mutex& mutex, const std::function<void()>& attempt) {
  std::size_t asked = 0;
  for (int round = 0;; ++round) {
    std::size_t shortfall = 0;
    caching_allocator::pressure_handler handler;
    {
      std::lock_guard lock(mutex);
      last_shortfall_ = 0;  // set again only by this attempt's budget failure
    }
    try {
      attempt();
      return;
    } catch (const out_of_memory& e) {
      {
        std::lock_guard lock(mutex);
        handler = pressure_;
        shortfall = last_shortfall_;
        last_shortfall_ = 0;
      }
      // Only a budget shortfall can be met by evicting (the device's own exhaustion is
      // handled inside), and a handler that keeps freeing without effect must not loop.
      if (!handler || shortfall == 0) throw;
      std::size_t freed = 0;
      if (round < 64) {
        {
          std::lock_guard lock(mutex);
          ++ctx_.st.pressure_calls;
        }
        freed = handler(shortfall);
      }
      if (freed == 0) {
        throw out_of_memory(std::string(e.what()) + " The replay engine was asked to evict more: it " +
                                (asked == 0 ? std::string("found no evictable buffer it could regenerate later")
                                            : "evicted " + format_bytes(asked) +
                                                  " more and found nothing else it could regenerate later") +
                                " (" + format_bytes(shortfall) + " short).",
                            e.details());
      }
      asked += freed;
    }
  }
}

void budget_ladder::with_overrun(std::mutex& mutex, const std::function<void()>& attempt) {
  try {
    attempt();
  } catch (const out_of_memory& e) {
    caching_allocator::overrun_handler handler;
    {
      std::lock_guard lock(mutex);
      handler = overrun_;
    }
    if (!handler || !handler(e)) throw;
    {
      std::lock_guard lock(mutex);
      ++ctx_.st.budget_overruns;
    }
    attempt();
  }
}

}  // namespace sublinear::allocator::detail
