// Note [Multi-level schedules]
// Rationale: the two-level grid of Note [Multi-pass] spaces its checkpoints uniformly and
//   stops at two levels. Below every drop set the budget leaves room for a few outputs at
//   a time, and how many times each part of the chain is recomputed depends on where
//   those few go: Griewank and Walther's binomial schedules (revolve, 2000) are optimal
//   for uniform chains, and Rotor (Beaumont et al., 2019, "Optimal checkpointing for
//   heterogeneous chains") finds the optimal persistent schedule for a chain whose stages
//   differ in cost and size, as a ResNet's stages and a Transformer's attention and
//   feed-forward halves do, with a dynamic program over (first stage, last stage, memory).
// Approach: units are the chain solver's segments (Note [Chain solver]), merged pairwise
//   when there are more than max_units; unit j has forward cost f_j (the traced launches
//   from the end of unit j-1 to its last production), its outputs x_j (a_j bytes) and its
//   internals (the tape, b_j bytes). Rotor's program over them is Note [Multi-level
//   table]. A schedule becomes a plan with horizons (Note [Multi-pass]): whatever a
//   subproblem stores gets the horizon T of the subproblem, so the recipe that restores
//   unit t's tape at T sweeps from x_{s-1} and regenerates those buffers at their own
//   addresses on the way; kept choices of Top are simply not dropped. The simulator, not
//   the model, judges which memory level fits the budget (Note [Multi-level bisection]).
// Limitations: persistent schedules at unit granularity, as in Rotor; within a unit every
//   internal comes back together. At most max_units units and max_entries table entries
//   (the slot count shrinks to fit), so very long chains are solved coarser.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>

#include "policy/packs.hpp"
#include "policy/solvers.hpp"

namespace sublinear::policy {

namespace {

constexpr std::size_t max_units = 256;
constexpr std::size_t max_entries = std::size_t{4} << 20;  // per table (costs as floats)
constexpr std::size_t slots_per_tape = 24;
constexpr std::size_t max_coarsenings = 3;  // tables with 2, 4, 8 times the slot size
// An internal whose page footprint is at least this many times its unplanned one stays
// resident (BatchNorm's 16-byte statistics in a 64 KiB page; Note [Multi-level table]).
constexpr std::size_t resident_ratio = 16;
constexpr std::size_t patience = 12;  // levels in a row that do not fit, above the bisection's boundary
constexpr float infinite = std::numeric_limits<float>::infinity();

struct unit {
  std::vector<std::uint32_t> internal;  // without the resident ones (resident_ratio)
  std::vector<std::uint32_t> outputs;
  double forward_s = 0.0;
  std::size_t tape = 0, out = 0;            // planned footprints (regenerated)
  std::size_t tape_kept = 0, out_kept = 0;  // unplanned footprints (kept)
  launch_id begins = none;                  // when its backward begins
};

// Choices: 0 none (infeasible), 1 base, 2 keep the tape, 3 + s' a checkpoint at s'.
using choice_t = std::uint16_t;

// best[m] = min(best[m], add + a[m] (+ b[m])) for m < n, why[m] = ch where it lowers. The
// table's inner loops (most of its time on long chains): written without branches and on
// rows that do not overlap, so the compiler can vectorize them (policy/CMakeLists.txt);
// each entry gets the same arithmetic in the same order as one at a time.
void relax(float* __restrict best, choice_t* __restrict why, std::size_t n, float add, const float* __restrict a,
           const float* __restrict b, choice_t ch) {
  for (std::size_t m = 0; m < n; ++m) {
    const float c = add + a[m] + b[m];
    const float old = best[m];
    const auto mask = static_cast<choice_t>(-static_cast<int>(c < old));
    best[m] = c < old ? c : old;
    why[m] = static_cast<choice_t>((ch & mask) | (why[m] & ~mask));
  }
}
void relax(float* __restrict best, choice_t* __restrict why, std::size_t n, float add, const float* __restrict a,
           choice_t ch) {
  for (std::size_t m = 0; m < n; ++m) {
    const float c = add + a[m];
    const float old = best[m];
    const auto mask = static_cast<choice_t>(-static_cast<int>(c < old));
    best[m] = c < old ? c : old;
    why[m] = static_cast<choice_t>((ch & mask) | (why[m] & ~mask));
  }
}

// Note [Multi-level table]
// Rationale: Rotor's recurrence, with bytes as the runtime will hold them.
// Approach: bytes are footprints once planned (whole pages) for buffers a recipe
//   regenerates, and as the allocator holds them unplanned for buffers kept from the
//   forward pass. An internal whose page footprint is at least resident_ratio times its
//   own size stays resident instead: BatchNorm's statistics are 16 bytes, a 64 KiB page
//   each when regenerated, and rebuilding them at their own restore point re-runs the
//   BatchNorm. Memory is counted in q-byte slots (q about 1/24 of the largest tape plus
//   output). Opt(s, t, m) is the least recompute to run the backward of units t down to
//   s with x_{s-1} and x_t resident (counted by the caller) and m slots for everything
//   else; with T = when unit t's backward begins:
//   - s == t: rebuild unit t's tape, f_t, if b_t fits;
//   - keep the tape: rebuild unit s with its tape and keep it (f_s), then
//     Opt(s + 1, t, m - b_s - a_s); unit s's own backward then needs nothing;
//   - a checkpoint s < s' <= t: sweep units s..s'-1 in scratch, storing x_{s'-1}
//     (F(s, s'-1), if the largest tape on the way fits), then Opt(s', t, m - a_{s'-1})
//     and, once the backward reaches s'-1, Opt(s, s'-1, m - a_{s'-1}).
//   Top(s, m) is the same for the forward pass itself, where sweeping costs nothing:
//   keep unit s whole (a drop set's kept segment), keep x_{s'-1} as a top checkpoint, or
//   at the last unit, keep it (it is resident at the turning point anyway).
// Limitations: the memory model is approximate (transient scratch is the largest tape
//   plus output of a sweep; outputs a unit's own backward needs are counted once).
//   Resident internals are held from the forward pass to their backward whatever the
//   schedule; the model leaves them out of its slots and the simulator charges them.
class multi_level_table {
 public:
  // `coarsening`: the slot size is 2^coarsening times the finest (solve_multi_level).
  multi_level_table(const planner::context& ctx, std::size_t coarsening) : cs_(ctx.candidates()) {
    std::vector<chain_segment> segs = chain_segments(cs_);
    const std::size_t per = std::max<std::size_t>(1, (segs.size() + max_units - 1) / max_units);
    for (std::size_t i = 0; i < segs.size(); i += per) {
      unit u;
      const std::size_t last = std::min(segs.size(), i + per) - 1;
      for (std::size_t k = i; k <= last; ++k) {
        // A merged unit's outputs are its last segment's; the others' become internals.
        std::vector<std::uint32_t>& outputs = k == last ? u.outputs : u.internal;
        u.internal.insert(u.internal.end(), segs[k].internal.begin(), segs[k].internal.end());
        outputs.insert(outputs.end(), segs[k].outputs.begin(), segs[k].outputs.end());
      }
      units_.push_back(std::move(u));
    }
    const iteration& it = ctx.graph();
    const bool packed = ctx.packs() && packs_apply(it);
    launch_id previous_end = none;
    std::size_t widest = 0;
    for (unit& u : units_) {
      launch_id lo = none, hi = 0;
      // Resident internals leave the unit: never dropped, not counted in its slots.
      std::erase_if(u.internal, [&](std::uint32_t c) { return cs_[c].bytes >= resident_ratio * cs_[c].unplanned_bytes; });
      for (std::uint32_t c : u.internal) {
        u.tape += cs_[c].bytes;
        u.tape_kept += cs_[c].unplanned_bytes;
        u.begins = std::min(u.begins, cs_[c].restore_before);
      }
      for (std::uint32_t c : u.outputs) {
        u.out += cs_[c].bytes;
        u.out_kept += cs_[c].unplanned_bytes;
        if (u.internal.empty()) u.begins = std::min(u.begins, cs_[c].restore_before);
      }
      if (packed) {
        // A regenerated tape is packed (Note [Packs] in packs.hpp).
        std::vector<buffer_id> members;
        for (std::uint32_t c : u.internal) members.push_back(cs_[c].buffer);
        u.tape = packed_footprint(it, members);
        members.clear();
        for (std::uint32_t c : u.outputs) members.push_back(cs_[c].buffer);
        u.out = packed_footprint(it, members);
      }
      for (std::uint32_t c : u.internal) lo = std::min(lo, cs_[c].produced_at), hi = std::max(hi, cs_[c].produced_at);
      for (std::uint32_t c : u.outputs) lo = std::min(lo, cs_[c].produced_at), hi = std::max(hi, cs_[c].produced_at);
      const launch_id from = previous_end == none ? lo : previous_end + 1;
      for (launch_id l = from; l <= hi && l < it.launches.size(); ++l) u.forward_s += it.launches[l].cost_s;
      if (previous_end == none || hi > previous_end) previous_end = hi;
      widest = std::max(widest, u.tape + u.out);
    }
    n_ = units_.size();
    if (n_ < 2) return;
    q_ = std::max<std::size_t>(512, (widest + slots_per_tape - 1) / slots_per_tape) << coarsening;
    const std::size_t pairs = n_ * (n_ + 1) / 2;
    const std::size_t room = ctx.candidates().size() == 0 ? 0 : max_entries / pairs;
    std::size_t total = 0;
    for (const unit& u : units_) total += std::max(u.tape, u.tape_kept) + std::max(u.out, u.out_kept);
    capped_ = room < slots(total) + 1;
    levels_ = std::min(room, slots(total) + 1);
    if (levels_ < 2) {
      n_ = 0;
      return;
    }
    fill();
  }

  [[nodiscard]] bool usable() const noexcept { return n_ >= 2; }
  [[nodiscard]] std::size_t levels() const noexcept { return levels_; }
  [[nodiscard]] std::size_t slot_bytes() const noexcept { return q_; }
  // Whether the levels stop short of the memory that keeps every unit whole.
  [[nodiscard]] bool capped() const noexcept { return capped_; }
  // The model's least recompute with m slots (infinite when it has no schedule).
  [[nodiscard]] float cost(std::size_t m) const noexcept { return top_cost_[m]; }

  // The plan of the schedule with m slots: one drop flag and horizon per candidate.
  void schedule(std::size_t m, std::vector<std::uint8_t>& dropped, std::vector<launch_id>& horizons) const {
    dropped.assign(cs_.size(), 0);
    horizons.assign(cs_.size(), none);
    for (const unit& u : units_) {
      for (std::uint32_t c : u.internal) dropped[c] = 1, horizons[c] = u.begins;
      for (std::uint32_t c : u.outputs) dropped[c] = 1, horizons[c] = u.begins;
    }
    std::size_t s = 0;
    while (true) {
      const choice_t ch = top_choice_[s * levels_ + m];
      if (ch == 1) {
        keep(units_[s], dropped);
        return;
      }
      if (ch == 2) {
        keep(units_[s], dropped);
        m -= slots(units_[s].tape_kept + units_[s].out_kept);
        ++s;
        continue;
      }
      const std::size_t split = ch - 3u;
      for (std::uint32_t c : units_[split - 1].outputs) dropped[c] = 0;
      replay(s, split - 1, m, dropped, horizons);
      m -= slots(units_[split - 1].out_kept);
      s = split;
    }
  }

 private:
  [[nodiscard]] std::size_t slots(std::size_t bytes) const noexcept { return (bytes + q_ - 1) / q_; }
  [[nodiscard]] std::size_t pair(std::size_t s, std::size_t t) const noexcept { return (t * (t + 1) / 2 + s) * levels_; }
  static void keep(const unit& u, std::vector<std::uint8_t>& dropped) {
    for (std::uint32_t c : u.internal) dropped[c] = 0;
    for (std::uint32_t c : u.outputs) dropped[c] = 0;
  }

  // Horizons for Opt(s, t, m), whose stores happen at units_[t].begins.
  void replay(std::size_t s, std::size_t t, std::size_t m, std::vector<std::uint8_t>& dropped,
              std::vector<launch_id>& horizons) const {
    while (true) {
      const launch_id at = units_[t].begins;
      const choice_t ch = choice_[pair(s, t) + m];
      if (ch == 1) return;  // the tape comes back at its own restore point
      if (ch == 2) {
        for (std::uint32_t c : units_[s].internal) horizons[c] = at;
        for (std::uint32_t c : units_[s].outputs) horizons[c] = at;
        m -= slots(units_[s].tape + units_[s].out);
        ++s;
        continue;
      }
      const std::size_t split = ch - 3u;
      for (std::uint32_t c : units_[split - 1].outputs) horizons[c] = at;
      replay(s, split - 1, m, dropped, horizons);  // later in time, its own horizon
      m -= slots(units_[split - 1].out);
      s = split;
    }
  }

  void fill() {
    const std::size_t L = levels_;
    std::vector<double> prefix(n_ + 1, 0.0);
    for (std::size_t j = 0; j < n_; ++j) prefix[j + 1] = prefix[j] + units_[j].forward_s;
    cost_.assign(n_ * (n_ + 1) / 2 * L, infinite);
    choice_.assign(cost_.size(), 0);
    for (std::size_t len = 1; len <= n_; ++len) {
      for (std::size_t s = 0; s + len <= n_; ++s) {
        const std::size_t t = s + len - 1;
        float* best = &cost_[pair(s, t)];
        choice_t* why = &choice_[pair(s, t)];
        if (s == t) {
          const auto add = static_cast<float>(units_[t].forward_s);
          for (std::size_t m = slots(units_[t].tape + units_[t].out); m < L; ++m) {
            if (add < best[m]) best[m] = add, why[m] = 1;
          }
          continue;
        }
        // Rows of other pairs: (s + 1, t), (split, t) and (s, split - 1) are never (s, t).
        const std::size_t kept = slots(units_[s].tape + units_[s].out);
        if (kept < L) relax(best + kept, why + kept, L - kept, static_cast<float>(units_[s].forward_s), &cost_[pair(s + 1, t)], 2);
        const std::size_t held = slots(units_[t].out);  // x_t, until unit t's backward is done
        std::size_t transient = 0;
        for (std::size_t split = s + 1; split <= t; ++split) {
          transient = std::max(transient, slots(units_[split - 1].tape + units_[split - 1].out));
          const std::size_t a = slots(units_[split - 1].out);
          const std::size_t from = std::max(held + transient, a);
          if (from >= L) continue;
          relax(best + from, why + from, L - from, static_cast<float>(prefix[split] - prefix[s]),
                &cost_[pair(split, t) + (from - a)], &cost_[pair(s, split - 1) + from], static_cast<choice_t>(split + 3));
        }
      }
    }
    top_cost_.assign(n_ * L, infinite);
    top_choice_.assign(n_ * L, 0);
    for (std::size_t s = n_; s-- > 0;) {
      float* best = &top_cost_[s * L];
      choice_t* why = &top_choice_[s * L];
      const std::size_t whole = slots(units_[s].tape_kept + units_[s].out_kept);
      if (s + 1 == n_) {
        for (std::size_t m = whole; m < L; ++m) best[m] = 0.0f, why[m] = 1;
        continue;
      }
      if (whole < L) relax(best + whole, why + whole, L - whole, 0.0f, &top_cost_[(s + 1) * L], 2);
      for (std::size_t split = s + 1; split < n_; ++split) {
        const std::size_t a = slots(units_[split - 1].out_kept);
        if (a >= L) continue;
        relax(best + a, why + a, L - a, 0.0f, &top_cost_[split * L], &cost_[pair(s, split - 1) + a],
              static_cast<choice_t>(split + 3));
      }
    }
    top_cost_.resize(L);  // Top(0, m) is all a schedule needs from here
    cost_.shrink_to_fit();
  }

  const candidate_set& cs_;
  std::vector<unit> units_;
  std::size_t n_ = 0;
  std::size_t q_ = 512;
  std::size_t levels_ = 0;
  bool capped_ = false;
  std::vector<float> cost_;
  std::vector<choice_t> choice_;
  std::vector<float> top_cost_;
  std::vector<choice_t> top_choice_;
};

// What solve_multi_level keeps per context: its tables (filled on first use; index k has
// slots 2^k times the finest) and the peak of the finest table's least-memory plan, once
// known (every budget below it is then answered at once).
struct multi_level_state {
  std::vector<std::unique_ptr<const multi_level_table>> tables;
  std::optional<std::size_t> least;
};

// Note [Multi-level bisection]
// Rationale: the model approximates scratch and page rounding, and non-candidate memory
//   moves during the backward pass, so only the simulator can say which level fits.
// Approach: a table is filled once per context for every m up to a cap; solve_on bisects
//   m for the largest level whose simulated plan fits the budget, and keeps the cheapest
//   simulated plan that fits. A table holds at most max_entries costs, so its levels may
//   stop short of the memory of the whole chain; where even its top level fits the
//   budget, tables with 2, 4 and 8 times coarser slots are filled in turn (each once per
//   context) and compete too.
// Limitations: the result is the best of the plans the bisection simulates, not a proven
//   optimum.

// Bisects one table's levels for the cheapest simulated plan within `budget` (into
// `best`); `least`, when given, receives the least level's peak (0: no plan). Returns
// whether the table's top level fits: a coarser table may then reach further.
// Levels below `from` are not tried (a finer table covered their memory).
bool solve_on(planner::context& ctx, const multi_level_table& table, std::size_t budget,
              std::optional<planner::context::evaluation>& best, std::optional<std::size_t>* least,
              std::size_t from = 0) {
  std::size_t lo = std::min(from, table.levels() - 1);
  while (lo < table.levels() && std::isinf(table.cost(lo))) ++lo;
  if (lo == table.levels()) {
    if (least) *least = 0;
    return false;
  }
  std::vector<std::uint8_t> dropped;
  std::vector<launch_id> horizons;
  const auto at = [&](std::size_t m) {
    table.schedule(m, dropped, horizons);
    planner::context::evaluation e = ctx.evaluate(dropped, horizons);
    const bool fits = e.fits(budget);
    if (m == lo && least) *least = e.ok ? e.sim.peak : 0;
    if (fits && (!best || e.sim.added_compute_s < best->sim.added_compute_s)) best = std::move(e);
    return fits;
  };
  // The least level's plan decides which budgets are met at all (its peak is the least
  // peak recorded); above it, the largest level whose plan fits, by bisection. Peaks grow
  // with the level, but the simulator is the judge: every level evaluated competes on
  // its simulated cost.
  if (!at(lo)) return false;
  std::size_t hi = table.levels() - 1;
  if (hi == lo) return true;
  if (at(hi)) return true;
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    (at(mid) ? lo : hi) = mid;
  }
  // Peaks are not monotone in the level (on a traced ResNet-434 they wander by a few
  // pages): levels above the boundary may fit too, and cost less. Walk up until
  // `patience` levels in a row do not fit.
  std::size_t misses = 0;
  for (std::size_t m = hi + 1; m < table.levels() && misses < patience; ++m) misses = at(m) ? 0 : misses + 1;
  return false;
}

}  // namespace

std::optional<planner::context::evaluation> solve_multi_level(planner::context& ctx, std::size_t budget) {
  if (!ctx.multi_pass()) return std::nullopt;
  multi_level_state& cached = ctx.state<multi_level_state>();
  std::vector<std::unique_ptr<const multi_level_table>>& tables = cached.tables;
  if (cached.least && (*cached.least == 0 || budget < *cached.least)) return std::nullopt;
  if (tables.empty()) tables.push_back(std::make_unique<const multi_level_table>(ctx, 0));
  if (!tables[0]->usable()) {
    cached.least = 0;
    return std::nullopt;
  }
  std::optional<planner::context::evaluation> best;
  bool top_fits = solve_on(ctx, *tables[0], budget, best, cached.least ? nullptr : &cached.least);
  // The finest table's levels cover the memory of a few dozen tapes (max_entries); where
  // its top level fits, the budget has room beyond them, which tables with 2, 4 and 8
  // times coarser slots reach. Each is filled once per context, when first needed.
  for (std::size_t k = 1; k <= max_coarsenings && top_fits && tables[k - 1]->capped(); ++k) {
    if (tables.size() <= k) tables.push_back(std::make_unique<const multi_level_table>(ctx, k));
    if (!tables[k]->usable()) break;
    const multi_level_table& finer = *tables[k - 1];
    const std::size_t reached = finer.levels() * finer.slot_bytes() / tables[k]->slot_bytes();
    top_fits = solve_on(ctx, *tables[k], budget, best, nullptr, reached > 0 ? reached - 1 : 0);
  }
  return best;
}

std::size_t multi_level_least_peak(planner::context& ctx) {
  if (!ctx.multi_pass()) return 0;
  const std::optional<std::size_t>& least = ctx.state<multi_level_state>().least;
  if (!least) (void)solve_multi_level(ctx, 0);
  return least.value_or(0);
}

}  // namespace sublinear::policy
