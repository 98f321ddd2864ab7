// The pressure valve: what the engine does when the allocator finds no room under the
// budget (Note [Strict budget] in allocator/detail/budget_ladder.hpp).
//
// Note [Pressure valve]
// Rationale: the planner predicts peaks from the traced iteration; fragmentation, the
//   chunk pool, prefetches and kernels whose timing shifts can still need pages the plan
//   did not foresee. A strict budget must then evict more rather than fail.
// Approach: the engine installs a pressure handler on the allocator (Note [Strict
//   budget]). Asked for `shortfall` bytes, it ranks the resident buffers it placed
//   evictable: never used again this iteration first, then latest next use (the launch
//   that will need it), then cheapest recompute per byte, and evicts them until the
//   shortfall is covered. A buffer qualifies only if its regeneration will be valid at
//   its next use: the launch entering now does not touch it, its plan entry's recipe has
//   run in this iteration and was its last writer, and nothing the recipe reads or writes
//   is written between now and that next use (the trace says who writes what). The
//   buffer comes back through the ENTER safety net. If nothing qualifies and the request
//   was for a buffer the plan places evictable, the allocator serves it from a free block
//   of a shared segment instead (Note [Strict budget]): the engine then keeps it resident
//   for the iteration, skipping its planned eviction (its recipes still run for the other
//   buffers they carry and rewrite it with the bytes it holds), and counts it in
//   iteration_report::kept_resident. Otherwise the allocator fails with out_of_memory
//   naming the budget, the shortfall and what the engine tried.
// Limitations: only buffers the plan placed evictable (dedicated pages) can go; pressure
//   from buffers the plan keeps resident still fails.
#include "common/text.hpp"
#include "runtime/detail/engine_impl.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace sublinear::runtime {

namespace {

using policy::buffer_id;
using policy::launch_id;
using policy::none;

}  // namespace

// The pressure valve: evicts resident buffers the plan placed evictable until
// `shortfall` bytes are on their way out. Returns the bytes asked to evict.
std::size_t engine::impl::relieve(std::size_t shortfall) {
  if (st == engine_state::trace && trace_budget_bytes > 0) return offload(shortfall);
  // A diverged iteration under an absolute budget keeps it the same way.
  if (diverged && trace_budget_bytes > 0 && have_plan && !prefetching) return offload(shortfall);
  if (!active() || prefetching) return 0;
  // The releases waiting for their checks first: the plan's own (Note [Unsettled releases]).
  const std::size_t settled = settle_releases(unsettled.size());
  if (settled >= shortfall) return settled;
  shortfall -= settled;
  // Offloads next: their pages go early at the cost of a wait (Note [Offload execution]).
  const std::size_t offloaded = offload_under_pressure(shortfall);
  const std::size_t released = settled + offloaded;
  if (offloaded >= shortfall) return released;
  shortfall -= offloaded;
  const auto& g = graph();
  const std::size_t n = g.launches.size();
  const std::size_t gran = alloc.granularity();
  struct candidate {
    buffer_id b;
    std::size_t next;      // next launch touching it (n: none this iteration)
    double cost_per_byte;  // its recipe's traced cost
  };
  std::vector<candidate> found;
  std::size_t considered = 0;
  for (buffer_id b = 0; b < g.buffers.size(); ++b) {
    if (!buffer_evictable[b] || kept_resident[b] || addr[b] == nullptr || freed[b] || evicted[b] || releasing[b] ||
        pins[b] != 0)
      continue;
    ++considered;
    const auto& u = uses[b];
    auto it = std::lower_bound(u.begin(), u.end(), static_cast<launch_id>(pos));
    const std::size_t next = it == u.end() ? n : *it;
    if (next == pos) continue;  // the launch entering now needs it
    const std::int32_t c = entry_of[b];
    if (c < 0) continue;
    const auto& e = plan.evictions[static_cast<std::size_t>(c)];
    // Its current value is the recipe's: the recipe's last write of it was its last write.
    launch_id writer = none;
    for (launch_id l : e.recipe)
      if (std::binary_search(g.launches[l].written.begin(), g.launches[l].written.end(), b)) writer = l;
    if (writer == none || last_write[b] != writer) {
      if (opts.config.log >= log_level::debug)
        log_debug("valve: buffer " + std::to_string(b) + " next use " + std::to_string(next) + ": entry " +
                  std::to_string(c) + "'s recipe did not write it last");
      continue;
    }
    if (!recipe_valid(static_cast<std::size_t>(c), std::max(next, pos + 1))) {
      if (opts.config.log >= log_level::debug)
        log_debug("valve: buffer " + std::to_string(b) + " next use " + std::to_string(next) +
                  ": its recipe would not be valid then");
      continue;
    }
    double cost = 0.0;
    for (launch_id l : e.recipe) cost += g.launches[l].cost_s;
    found.push_back({b, next, cost / static_cast<double>(g.buffers[b].size)});
  }
  std::sort(found.begin(), found.end(), [](const candidate& x, const candidate& y) {
    if (x.next != y.next) return x.next > y.next;
    return x.cost_per_byte < y.cost_per_byte;
  });
  std::size_t asked = 0;
  std::size_t count = 0;
  for (const candidate& c : found) {
    if (asked >= shortfall) break;
    if (!evict_buffer(c.b, static_cast<std::size_t>(entry_of[c.b]), nullptr, false)) continue;
    asked += (g.buffers[c.b].size + gran - 1) / gran * gran;
    ++count;
  }
  asked += released;
  current.pressure_evictions += count;
  log_info("iteration " + std::to_string(iteration_index) + ": pressure at launch " + std::to_string(pos) + ", " +
           format_bytes(shortfall) + " short of the budget: evicted " + std::to_string(count) + " more buffers (" +
           format_bytes(asked) + ") of " + std::to_string(found.size()) + " that could be regenerated later (" +
           std::to_string(considered) + " resident and evictable)");
  return asked;
}

// Asked when a request finds no room even after the valve (Note [Scaled cache allowance]):
// a plan made with the scaled cache allowance gives the budget up for the rest of the
// iteration, and the next plan keeps the whole traced cache back. Prefetches are left to
// fail: they are retried at their restore point. Only a budget shortfall is lifted: when
// the device's memory or the address space ran out, no budget would help, and the error
// goes to the caller as it would without a plan.
bool engine::impl::overrun(const out_of_memory& error) {
  if (!active() || prefetching || current.budget_lifted) return false;
  if (error.details().ran_out != out_of_memory::cause::budget) return false;
  if (allowance != policy::cache_allowance_mode::scaled) {
    // Buffers the plan evicts were kept this iteration (Note [Unseen writes]); the room
    // they hold is not the plan's to give. The next plan never evicts them.
    if (kept_unseen == 0) return false;
    log_warn("iteration " + std::to_string(iteration_index) + ": " + std::to_string(kept_unseen) +
             " buffers kept resident after writes the trace did not see leave no room at launch " +
             std::to_string(pos) + " (" + error.what() + "); the rest of this iteration runs without the budget, "
             "and the next plan never evicts them (Note [Unseen writes]).");
    alloc.set_budget(0);
    current.budget_lifted = true;
    return true;
  }
  log_warn("iteration " + std::to_string(iteration_index) + ": the plan made with the allocator's cache scaled to "
           "the budget ran out of room at launch " + std::to_string(pos) + " (" + error.what() +
           "); the rest of this iteration runs without the budget, and the next plan keeps the whole traced "
           "cache back (Note [Scaled cache allowance]).");
  alloc.set_budget(0);
  current.budget_lifted = true;
  scaled_refused = true;
  return true;
}

}  // namespace sublinear::runtime
