// The live-block map, the parameter scan and the never-replay list (Note [Pointer scan]).
#include "tracer/pointer_scan.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "sublinear/error.hpp"

namespace sublinear::tracer {

// ---- block_map -------------------------------------------------------------------------------

namespace {

constexpr std::uint64_t hash_page(std::uint64_t key) noexcept {
  return key * 0x9E3779B97F4A7C15ULL;  // Fibonacci hashing: the top bits index the table
}

auto by_base = [](const block_map::entry& e, std::uint64_t base) { return e.base < base; };

}  // namespace

const std::vector<block_map::entry>* block_map::page(std::uint64_t page_number) const noexcept {
  if (table_.empty()) return nullptr;
  const std::uint64_t key = page_number + 1;
  const std::size_t mask = table_.size() - 1;
  const unsigned shift = 64U - static_cast<unsigned>(std::countr_zero(table_.size()));
  for (std::size_t i = static_cast<std::size_t>(hash_page(key) >> shift) & mask;; i = (i + 1) & mask) {
    const slot& s = table_[i];
    if (s.key == key) return &pages_[s.index];
    if (s.key == 0) return nullptr;
  }
}

void block_map::grow() {
  const std::size_t capacity = table_.empty() ? 64 : table_.size() * 2;
  std::vector<slot> old = std::move(table_);
  table_.assign(capacity, slot{});
  const std::size_t mask = capacity - 1;
  const unsigned shift = 64U - static_cast<unsigned>(std::countr_zero(capacity));
  for (const slot& s : old) {
    if (s.key == 0) continue;
    std::size_t i = static_cast<std::size_t>(hash_page(s.key) >> shift) & mask;
    while (table_[i].key != 0) i = (i + 1) & mask;
    table_[i] = s;
  }
}

std::vector<block_map::entry>& block_map::page_for_insert(std::uint64_t page_number) {
  // Pages are never removed (an emptied page keeps its slot): the allocator reuses its
  // address range, so the number of distinct pages stays bounded by the space in use.
  if ((pages_.size() + 1) * 2 > table_.size()) grow();
  const std::uint64_t key = page_number + 1;
  const std::size_t mask = table_.size() - 1;
  const unsigned shift = 64U - static_cast<unsigned>(std::countr_zero(table_.size()));
  std::size_t i = static_cast<std::size_t>(hash_page(key) >> shift) & mask;
  for (; table_[i].key != 0; i = (i + 1) & mask) {
    if (table_[i].key == key) return pages_[table_[i].index];
  }
  table_[i] = slot{key, static_cast<std::uint32_t>(pages_.size())};
  return pages_.emplace_back();
}

void block_map::insert(std::uint64_t base, std::uint64_t size, std::uint32_t id) {
  if (size == 0) return;
  if (at(base) != nullptr) erase(base);
  const std::uint64_t end = size > ~std::uint64_t{0} - base ? ~std::uint64_t{0} : base + size;
  const entry e{base, end, id};
  const std::uint64_t first = base >> page_shift, last = (end - 1) >> page_shift;
  if (last - first >= max_paged_span) {
    large_.insert_or_assign(base, e);
  } else {
    for (std::uint64_t p = first;; ++p) {
      std::vector<entry>& v = page_for_insert(p);
      v.insert(std::lower_bound(v.begin(), v.end(), base, by_base), e);
      if (p == last) break;
    }
  }
  ++count_;
  lo_ = std::min(lo_, base);
  hi_ = std::max(hi_, end);
}

bool block_map::erase(std::uint64_t base) {
  if (const auto big = large_.find(base); big != large_.end()) {
    large_.erase(big);
  } else {
    const entry* found = at(base);
    if (found == nullptr) return false;
    const std::uint64_t end = found->end;
    for (std::uint64_t p = base >> page_shift, last = (end - 1) >> page_shift;; ++p) {
      // The page exists (the block was inserted through it); the map owns it, so the cast
      // away from the lookup's const view is sound.
      auto& v = const_cast<std::vector<entry>&>(*page(p));
      auto it = std::lower_bound(v.begin(), v.end(), base, by_base);
      if (it != v.end() && it->base == base) v.erase(it);
      if (p == last) break;
    }
  }
  if (--count_ == 0) {
    // The filter only widens while blocks live; reset it when the map empties.
    lo_ = ~std::uint64_t{0};
    hi_ = 0;
  }
  return true;
}

const block_map::entry* block_map::find(std::uint64_t address) const noexcept {
  if (address < lo_ || address >= hi_) return nullptr;
  if (const std::vector<entry>* v = page(address >> page_shift); v != nullptr && !v->empty()) {
    // The last block starting at or before `address` is the only candidate among the
    // page's: blocks do not overlap.
    auto it = std::upper_bound(v->begin(), v->end(), address,
                               [](std::uint64_t a, const entry& e) { return a < e.base; });
    if (it != v->begin() && address < std::prev(it)->end) return &*std::prev(it);
  }
  if (large_.empty()) return nullptr;
  auto it = large_.upper_bound(address);
  if (it == large_.begin()) return nullptr;
  --it;
  return address < it->second.end ? &it->second : nullptr;
}

const block_map::entry* block_map::at(std::uint64_t base) const noexcept {
  if (const std::vector<entry>* v = page(base >> page_shift); v != nullptr) {
    auto it = std::lower_bound(v->begin(), v->end(), base, by_base);
    if (it != v->end() && it->base == base) return &*it;
  }
  const auto big = large_.find(base);
  return big != large_.end() ? &big->second : nullptr;
}

void block_map::clear() {
  table_.clear();
  pages_.clear();
  large_.clear();
  count_ = 0;
  lo_ = ~std::uint64_t{0};
  hi_ = 0;
}

std::size_t block_map::page_entries() const noexcept {
  std::size_t n = 0;
  for (const auto& v : pages_) n += v.size();
  return n;
}

std::vector<block_map::entry> block_map::entries() const {
  std::vector<entry> out;
  out.reserve(count_);
  for (const slot& s : table_) {
    if (s.key == 0) continue;
    const std::uint64_t page_number = s.key - 1;
    for (const entry& e : pages_[s.index]) {
      // A block spanning several pages is reported once, from its first page.
      if ((e.base >> page_shift) == page_number) out.push_back(e);
    }
  }
  for (const auto& [base, e] : large_) out.push_back(e);
  return out;
}

// ---- scan --------------------------------------------------------------------------------------

void scan_params(std::span<const std::byte> params, const block_map& blocks,
                 std::vector<scan_hit>& out) {
  if (blocks.empty() || params.size() < 8) return;
  const std::byte* p = params.data();
  const std::size_t first = out.size();
  auto look = [&](std::size_t off) {
    std::uint64_t value;
    std::memcpy(&value, p + off, sizeof value);
    if (value == 0) return false;
    const block_map::entry* e = blocks.find(value);
    if (e == nullptr) return false;
    out.push_back(scan_hit{static_cast<std::uint32_t>(off), e->id, e->base, value - e->base});
    return true;
  };
  for (std::size_t off = 0; off + 8 <= params.size(); off += 8) (void)look(off);
  const std::size_t aligned = out.size();
  // Then the windows at other offsets (a pointer in a packed struct) that share no byte
  // with an aligned hit: those would be an aligned pointer's bytes shifted.
  auto overlaps_aligned = [&](std::size_t off) {
    for (std::size_t i = first; i < aligned; ++i) {
      const std::size_t a = out[i].param_offset;
      if (a < off + 8 && off < a + 8) return true;
    }
    return false;
  };
  for (std::size_t off = 1; off + 8 <= params.size(); ++off) {
    if (off % 8 == 0 || overlaps_aligned(off)) continue;
    if (look(off)) off += 7;  // the next window starting inside this one would be its bytes shifted
  }
  if (out.size() > aligned)
    std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
              [](const scan_hit& x, const scan_hit& y) { return x.param_offset < y.param_offset; });
}

// ---- never-replay list ------------------------------------------------------------------------

namespace {

constexpr char lower(char c) noexcept { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

bool glob_match(std::string_view pattern, std::string_view text) noexcept {
  // Iterative match with one backtracking point (the last '*'): linear in practice and
  // never recursive, whatever the pattern.
  std::size_t p = 0, t = 0;
  std::size_t star = std::string_view::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || lower(pattern[p]) == lower(text[t]))) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_t = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++star_t;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

never_replay_list::never_replay_list(std::vector<std::string> patterns) {
  for (auto& p : patterns) add(std::move(p));
}

never_replay_list never_replay_list::defaults() {
  return never_replay_list({
      "*nccl*",             // collectives: every rank must take part; work items in a FIFO
      "*grouped_gemm*",     // per-group pointer arrays in device memory
      "*groupedgemm*",
      "*ptr_array*",        // CUTLASS pointer-array GEMMs
      "*ptrarray*",
      "*batched*",          // cublas<t>gemmBatched: device arrays of operand pointers
      "!*stridedbatched*",  // ... but strided batched takes its operands by value
      "!*strided_batched*",
      "*tmawarpspecialized*",  // CUTLASS kernels fed by TMA descriptors
      "*tensormap*",
  });
}

never_replay_list never_replay_list::parse(std::string_view list) {
  never_replay_list out;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    std::size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view item = list.substr(pos, comma - pos);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item == "default") {
      const never_replay_list d = defaults();
      for (const auto& p : d.patterns()) out.add(p);
    } else if (!item.empty()) {
      out.add(std::string(item));
    }
    pos = comma + 1;
  }
  return out;
}

void never_replay_list::add(std::string pattern) {
  if (pattern.empty() || pattern == "!") {
    throw config_error("never-replay list: empty pattern '" + pattern +
                       "' (expected a glob such as '*nccl*', or '!glob' to exempt names)");
  }
  patterns_.push_back(std::move(pattern));
}

bool never_replay_list::matches(std::string_view kernel_name) const {
  bool result = false;
  for (const std::string& p : patterns_) {
    const bool negated = p.front() == '!';
    std::string_view glob(p);
    if (negated) glob.remove_prefix(1);
    if (glob_match(glob, kernel_name)) result = !negated;
  }
  return result;
}

bool has_tensor_map_param(std::span<const param_slot> params) noexcept {
  for (const param_slot& s : params) {
    if (s.size == 128 && s.offset % 64 == 0) return true;  // sizeof(CUtensorMap), alignas(64)
  }
  return false;
}

}  // namespace sublinear::tracer
