// What every planner shares: the search context (evaluate), the contract (make_plan,
// Note [Planner contract] in planner.hpp) and the search for the smallest feasible budget.
#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/text.hpp"
#include "policy/packs.hpp"
#include "policy/retention.hpp"
#include "policy/solvers.hpp"

namespace sublinear::policy {

// ---- context ----------------------------------------------------------------------------

planner::context::context(const iteration& it, bool multi_pass, bool packs, const offload_settings& off)
    : it_(&it),
      flow_(it),
      candidates_(flow_),
      sim_(it, off.link, off.host_budget),
      drops_(candidates_),
      multi_pass_(multi_pass),
      packs_(packs),
      offload_(off) {}

planner::context::evaluation planner::context::evaluate(std::span<const std::uint8_t> dropped,
                                                        std::span<const launch_id> horizons) {
  ++evaluations_;
  evaluation e;
  e.dropped.assign(dropped.begin(), dropped.end());
  e.dropped.resize(candidates_.size(), 0);
  e.horizons.assign(horizons.begin(), horizons.end());
  drop_plan_builder::outcome built = drops_.build(e.dropped, horizons);
  if (!built.ok) {
    e.error = std::move(built.error);
    e.refused = std::move(built.refused);
    return e;
  }
  e.result = std::move(built.result);
  if (packs_) add_packs(*it_, e.result);
  e.sim = sim_.run(e.result);
  if (!e.sim.valid) {
    // A drop set always yields a valid plan; anything else is a bug worth a loud error.
    throw std::logic_error("sublinear: internal error: a drop-set plan failed validation: " + e.sim.error);
  }
  record(e.sim, e.result);
  e.ok = true;
  return e;
}

planner::context::evaluation planner::context::evaluate_actions(std::span<const action> actions,
                                                                std::span<const launch_id> need_lo,
                                                                std::span<const launch_id> need_hi,
                                                                std::span<const launch_id> horizons,
                                                                std::span<const std::uint32_t> packed) {
  ++evaluations_;
  evaluation e;
  e.dropped.assign(candidates_.size(), 0);
  e.horizons.assign(horizons.begin(), horizons.end());
  e.need_lo.assign(need_lo.begin(), need_lo.end());
  e.need_hi.assign(need_hi.begin(), need_hi.end());
  std::vector<offload_request> requests;
  std::vector<std::uint32_t> request_pack;  // per request: its `packed` value
  for (std::uint32_t c = 0; c < candidates_.size() && c < actions.size(); ++c) {
    if (actions[c] == action::drop) e.dropped[c] = 1;
    if (actions[c] != action::offload) continue;
    const candidate& cd = candidates_[c];
    offload_request r;
    r.target = cd.buffer;
    r.evict_after = cd.evict_after;
    r.restore_before = cd.restore_before;
    if (c < need_lo.size()) r.need_lo = need_lo[c];
    if (c < need_hi.size()) r.need_hi = need_hi[c];
    requests.push_back(r);
    request_pack.push_back(c < packed.size() ? packed[c] : none);
  }
  // The offload search changes offloads many times over one drop set (a whole cover
  // from offloads alone): the packed drop plan of the last drop set is kept.
  if (!last_drops_ || last_drops_->dropped != e.dropped || last_drops_->horizons != e.horizons) {
    drop_plan_builder::outcome built = drops_.build(e.dropped, horizons);
    if (!built.ok) {
      e.error = std::move(built.error);
      e.refused = std::move(built.refused);
      return e;
    }
    if (packs_) add_packs(*it_, built.result);
    last_drops_ = built_drops{e.dropped, e.horizons, std::move(built.result)};
  }
  e.result = last_drops_->result;
  fetch_before_recipes(*it_, e.result, requests);
  std::vector<pack> packs;
  if (!pack_requests(*it_, requests, request_pack, packs, e.error)) return e;
  const std::size_t placed = e.result.offloads.size();
  place_offloads(*it_, offload_.link, e.result, requests);
  // Each pack's other members ride on its first member's offload, at the same points.
  for (std::size_t j = placed, k = 0; j < placed + requests.size(); ++j) {
    if (k >= packs.size() || e.result.offloads[j].target != packs[k].members.front()) continue;
    for (std::size_t i = 1; i < packs[k].members.size(); ++i) {
      policy::offload o = e.result.offloads[j];
      o.target = packs[k].members[i];
      e.result.offloads.push_back(o);
    }
    e.result.packs.push_back(std::move(packs[k++]));
  }
  e.sim = sim_.run(e.result);
  if (!e.sim.valid) {
    e.error = e.sim.error;
    return e;
  }
  record(e.sim, e.result);
  e.ok = true;
  return e;
}

std::vector<action> planner::context::actions_of(const evaluation& e) const {
  std::vector<action> actions(candidates_.size(), action::keep);
  for (std::uint32_t c = 0; c < candidates_.size() && c < e.dropped.size(); ++c)
    if (e.dropped[c] != 0) actions[c] = action::drop;
  for (const policy::offload& o : e.result.offloads) {
    const std::uint32_t c = candidates_.index_of(o.target);
    if (c != none) actions[c] = action::offload;
  }
  return actions;
}

planner::context::evaluation planner::context::evaluate_keeping_refused(std::span<const std::uint8_t> dropped) {
  evaluation e = evaluate(dropped);
  if (e.ok || e.refused.empty()) return e;
  std::vector<std::uint8_t> kept = e.dropped;
  for (std::size_t round = 0; !e.ok && !e.refused.empty() && round < kept.size(); ++round) {
    for (std::uint32_t c : e.refused) kept[c] = 0;
    e = evaluate(kept);
  }
  return e;
}

std::size_t planner::context::unplanned_peak() {
  if (!unplanned_peak_) unplanned_peak_ = sim_.run(plan{}).peak;
  return *unplanned_peak_;
}

// ---- the contract -----------------------------------------------------------------------

plan planner::make_plan(const iteration& it, std::size_t budget, const options& o) const {
  if (const std::string problem = check_iteration(it); !problem.empty()) {
    throw config_error("sublinear: the analysed iteration is malformed: " + problem);
  }
  const auto checked = [&](plan p, const simulation& s) {
    if (!s.valid) {
      throw std::logic_error("sublinear: internal error: planner '" + std::string(name()) +
                             "' produced an invalid plan: " + s.error);
    }
    if (s.peak > budget) {
      throw std::logic_error("sublinear: internal error: planner '" + std::string(name()) + "' returned a plan of " +
                             format_bytes(s.peak) + " for a budget of " + format_bytes(budget));
    }
    p.planner = std::string(name());
    p.budget = budget;
    record(s, p);
    return p;
  };
  offload_settings off{o.offload, o.link, o.host_budget, o.threads, o.offload_packs, o.rerun_targets, o.fetch_margin};
  if (o.offload != offload_mode::off && !offloads()) {
    if (o.offload == offload_mode::only) {
      throw config_error("sublinear: planner '" + std::string(name()) +
                         "' does not offload, so offload 'only' cannot be planned with it; planners that offload: " +
                         offloading_planner_list() + " (or set the offload mode to auto or off)");
    }
    off.mode = offload_mode::off;
  }
  if (off.mode != offload_mode::off && !o.link.usable()) {
    if (off.mode == offload_mode::only) {
      throw config_error(
          "sublinear: offload 'only' needs a link model with a bandwidth in both directions (set the link "
          "bandwidth, or set the offload mode to auto or off)");
    }
    off.mode = offload_mode::off;
  }
  context ctx(it, o.multi_pass, o.packs, off);
  std::optional<plan> best;
  std::optional<infeasible_budget> refused;
  try {
    plan p = search(ctx, budget);
    const simulation s = ctx.sim().run(p);
    best = checked(std::move(p), s);
  } catch (const infeasible_budget& e) {
    refused = e;
  }
  // Note [Retention]: plan again with every option applied; keep it if it fits where the
  // first did not, or adds less compute.
  std::vector<retention> offered;
  if (o.retention && !(best && best->evictions.empty())) offered = retention_options(ctx.candidates());
  if (!offered.empty()) {
    const iteration kept = with_retentions(it, offered);
    context with(kept, o.multi_pass, o.packs, off);
    try {
      plan q = search(with, budget);
      q.retentions = std::move(offered);
      trim_retentions(q, it);
      const simulation s = simulate(it, q, off.link, off.host_budget);
      // An invalid plan goes through checked() too: it is a bug, and says so.
      if (!best || !s.valid ||
          s.added_time_s() < (best->added_compute_s + best->predicted_stall_s) * (1.0 - 1e-9))
        best = checked(std::move(q), s);
    } catch (const infeasible_budget& e) {
      if (!best && refused)
        refused.emplace(name(), budget, std::min(refused->smallest_feasible(), e.smallest_feasible()),
                        std::min(refused->lower_bound(), e.lower_bound()));
    }
  }
  if (best) return std::move(*best);
  if (off.mode != offload_mode::off) {
    // Say what bounded the offloads (Note [Offload]).
    std::string why = off.mode == offload_mode::only ? "offload only (no recompute)" : "with offload";
    why += off.host_budget != 0 ? ", offloads limited to a host budget of " + format_bytes(off.host_budget) +
                                      " (a larger host budget may meet it)"
                                : ", host memory unbounded";
    throw infeasible_budget(name(), budget, refused->smallest_feasible(), refused->lower_bound(), why);
  }
  throw *refused;
}

plan attempt_planner::search(context& ctx, std::size_t budget) const {
  // Nothing to evict: no planner should recompute anything (their models may be more
  // conservative than the simulator about page rounding).
  if (ctx.unplanned_peak() <= budget) return plan{};
  if (std::optional<plan> p = attempt(ctx, budget)) return std::move(*p);
  // Two-level plans meet exactly the budgets from their least peak up; below it attempt()
  // answers from the cached least peak without repeating their grid.
  const std::size_t two = deepens() ? multi_pass_least_peak(ctx) : 0;
  const std::size_t smallest = smallest_feasible_budget(ctx, [&](std::size_t b) {
    return ctx.unplanned_peak() <= b || (two != 0 && two <= b) || attempt(ctx, b).has_value();
  });
  return plan_at_smallest(ctx, name(), budget, smallest, [&](std::size_t b) { return attempt(ctx, b); });
}

std::size_t smallest_feasible_budget(planner::context& ctx, const std::function<bool(std::size_t)>& meets) {
  const std::size_t floor = ctx.lower_bound();
  std::size_t hi = std::max(ctx.unplanned_peak(), floor);
  std::size_t lo = floor;
  // Invariant: meets(hi) (evicting nothing meets the unplanned peak). From the lower
  // bound, never from the budget asked for: the answer is the same for every budget.
  while (lo < hi && hi - lo > hi / 1024) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (meets(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return hi;
}

plan plan_at_smallest(planner::context& ctx, std::string_view planner_name, std::size_t budget, std::size_t smallest,
                      const std::function<std::optional<plan>(std::size_t)>& attempt) {
  if (smallest > budget) throw infeasible_budget(planner_name, budget, smallest, ctx.lower_bound());
  if (ctx.unplanned_peak() <= smallest) return plan{};
  if (std::optional<plan> p = attempt(smallest)) return std::move(*p);
  throw std::logic_error("sublinear: internal error: planner '" + std::string(planner_name) +
                         "' met its smallest feasible budget of " + format_bytes(smallest) +
                         " while searching for it and not when planning at it");
}

}  // namespace sublinear::policy
