#include "allocator/detail/segment_trim.hpp"

#include <algorithm>
#include <memory>

#include "common/round_up.hpp"
#include "common/text.hpp"

namespace sublinear::allocator::detail {
namespace {

std::size_t round_down(std::size_t n, std::size_t multiple) { return n / multiple * multiple; }

}  // namespace

segment_trim::segment_trim(context& ctx, address_space& space, block_pool& pool, segment_table& segments)
    : ctx_(ctx), space_(space), pool_(pool), segments_(segments) {}

bool segment_trim::cut_holes(std::size_t bytes) {
  const std::size_t granularity = ctx_.granularity;
  std::vector<hole> holes;
  std::size_t gain = 0;
  for (const auto& [base, sp] : segments_.all()) {
    segment& seg = *sp;
    if (!seg.mapped || seg.kind == pool_kind::dedicated || seg.first == nullptr || seg.first->next == nullptr)
      continue;  // unmapped, never split, or wholly one block (released, not trimmed)
    hole best{&seg, nullptr, 0, 0};
    for (block* b = seg.first; b != nullptr; b = b->next) {
      if (!b->in_free_set) continue;
      const auto from = static_cast<std::size_t>(b->ptr - seg.base);
      const std::size_t lo = round_up(from, granularity);
      const std::size_t hi = round_down(from + b->size, granularity);
      if (hi > lo && hi - lo > best.gain()) best = {&seg, b, lo, hi};
    }
    if (best.free == nullptr) continue;
    holes.push_back(best);
    gain += best.gain();
  }
  if (holes.empty() || ctx_.st.mapped + bytes > ctx_.st.budget + gain) return false;
  std::sort(holes.begin(), holes.end(), [](const hole& a, const hole& b) { return a.gain() > b.gain(); });
  // Every stream that may still touch a segment: its own and those its live blocks
  // were used on (record_stream).
  std::vector<stream_handle> streams;
  for (const hole& h : holes) {
    streams.push_back(h.seg->stream);
    for (block* b = h.seg->first; b != nullptr; b = b->next)
      streams.insert(streams.end(), b->stream_uses.begin(), b->stream_uses.end());
  }
  std::sort(streams.begin(), streams.end());
  streams.erase(std::unique(streams.begin(), streams.end()), streams.end());
  for (stream_handle s : streams) ctx_.wait_for_stream(s);
  std::vector<std::byte> stash;
  for (const hole& h : holes) {
    if (ctx_.fits(bytes)) break;
    cut(h, stash);
  }
  return ctx_.fits(bytes);
}

// Replaces `h.seg`'s chunk by chunks of its live parts before and after the hole, the
// part after becoming a segment of its own. Precondition: no device work touches the
// segment. With room under the budget for the new chunks beside the old one they are
// created first, and a device that refuses them leaves everything as it was; without,
// the old chunk goes first (the budget holds at every step), and a device that then
// refuses the smaller chunks is a device error.
void segment_trim::cut(const hole& h, std::vector<std::byte>& stash) {
  vmm& device = ctx_.device;
  stats& st = ctx_.st;
  segment& seg = *h.seg;
  char* const base = seg.base;
  const std::size_t head = h.lo, tail = seg.size - h.hi;
  const auto fail = [&](const char* what, vmm_status s) {
    return device_error("sublinear: cutting " + format_bytes(h.gain()) + " out of a segment of " +
                        format_bytes(h.hi + tail) + " on the " + device.name() + " device failed at " + what +
                        " (" + to_string(s) + ": " + device.last_error() + "); its live blocks are lost");
  };
  chunk_handle fresh[2] = {0, 0};  // head, tail
  const std::size_t sizes[2] = {head, tail};
  char* const bases[2] = {base, base + h.hi};
  const auto release_fresh = [&] {
    for (chunk_handle& c : fresh) {
      if (c == 0) continue;
      device.release_chunk(c);
      ++st.release_calls;
      c = 0;
    }
  };
  // Creates the chunks; false (none kept) if the device refuses one.
  const auto create = [&]() -> vmm_status {
    for (int i = 0; i < 2; ++i) {
      if (sizes[i] == 0) continue;
      const vmm_status s = device.create_chunk(sizes[i], &fresh[i]);
      ++st.create_calls;
      if (s != vmm_status::ok) {
        release_fresh();
        return s;
      }
    }
    ctx_.note_mapped(static_cast<std::ptrdiff_t>(head + tail));
    return vmm_status::ok;
  };
  const bool beside = ctx_.fits(head + tail);
  if (beside && create() != vmm_status::ok) return;  // no room on the device: keep the segment
  stash.resize(head + tail);
  for (int i = 0; i < 2; ++i) {
    if (sizes[i] == 0) continue;
    if (device.copy_to_host(stash.data() + (i == 0 ? 0 : head), bases[i], sizes[i]) != vmm_status::ok) {
      if (beside) ctx_.note_mapped(-static_cast<std::ptrdiff_t>(head + tail));
      release_fresh();
      return;  // this backend cannot copy: nothing has changed
    }
  }
  try {
    segment* one[] = {&seg};
    segments_.unmap(one);
  } catch (...) {
    if (beside) ctx_.note_mapped(-static_cast<std::ptrdiff_t>(head + tail));
    release_fresh();
    throw;
  }
  // From here the live parts' bytes live only in `stash`.
  if (!beside) {
    if (const vmm_status s = create(); s != vmm_status::ok) throw fail("create_chunk", s);
  }
  for (int i = 0; i < 2; ++i) {
    if (sizes[i] == 0) continue;
    vmm_status s = device.map(bases[i], sizes[i], fresh[i]);
    ++st.map_calls;
    if (s != vmm_status::ok) throw fail("map", s);
    s = device.set_access(bases[i], sizes[i]);
    ++st.set_access_calls;
    if (s != vmm_status::ok) throw fail("set_access", s);
    s = device.copy_to_device(bases[i], stash.data() + (i == 0 ? 0 : head), sizes[i]);
    if (s != vmm_status::ok) throw fail("copying a live part back", s);
  }
  split_at(h, fresh[0], fresh[1]);  // may destroy `seg`
  space_.give(base + h.lo, h.gain());
  st.reserved -= h.gain();
  ++st.segment_trims;
  st.trimmed_bytes += h.gain();
}

// The block lists of cut(): `h.free` keeps what of it lies before `h.lo` (or goes), a new
// free block takes what lies after `h.hi`, and the blocks from there on move to a new
// segment at `h.hi` mapped by `tail_chunk`. With no head, that segment replaces `h.seg`.
void segment_trim::split_at(const hole& h, chunk_handle head_chunk, chunk_handle tail_chunk) {
  segment* seg = h.seg;
  block* f = h.free;
  char* const cut_lo = seg->base + h.lo;
  char* const cut_hi = seg->base + h.hi;
  char* const f_end = f->ptr + f->size;
  block* const before = f->prev;
  block* after = f->next;
  pool_.erase_free(f);
  if (f->ptr < cut_lo) {  // the free part before the hole stays, at the head's end
    f->size = static_cast<std::size_t>(cut_lo - f->ptr);
    f->next = nullptr;
    pool_.insert_free(f);
  } else {
    if (before != nullptr) before->next = nullptr;
    pool_.recycle(f);
  }
  if (h.hi < seg->size) {
    auto tail = std::make_unique<segment>();
    tail->base = cut_hi;
    tail->size = seg->size - h.hi;
    tail->handle = tail_chunk;
    tail->mapped = true;
    tail->kind = seg->kind;
    tail->stream = seg->stream;
    if (cut_hi < f_end) {  // the free part after the hole starts the new segment
      block* g = pool_.make();
      g->ptr = cut_hi;
      g->size = static_cast<std::size_t>(f_end - cut_hi);
      g->seg = tail.get();
      g->stream = seg->stream;
      g->next = after;
      if (after != nullptr) after->prev = g;
      after = g;
      pool_.insert_free(g);
    } else {
      after->prev = nullptr;
    }
    tail->first = after;
    for (block* b = after; b != nullptr; b = b->next) b->seg = tail.get();
    segments_.insert(std::move(tail));
  }
  if (h.lo == 0) {  // no head: the old segment is gone
    if (seg->has_free_event) ctx_.events.release(seg->free_event);
    segments_.erase(seg);
    return;
  }
  seg->size = h.lo;
  seg->handle = head_chunk;
  seg->mapped = true;
}

}  // namespace sublinear::allocator::detail
