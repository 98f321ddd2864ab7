// The solvers the planners share (solver_*.cpp). Each searches one family of plans for a
// context and a budget and returns the cheapest plan it finds within the budget, already
// simulated (planner::context::evaluation), or nothing. Planners call them; a planner file
// calls no other planner file. Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "policy/candidates.hpp"
#include "policy/planner_detail.hpp"

namespace sublinear::policy {

// ---- solver_chain.cpp -------------------------------------------------------------------

// The chain solver (Note [Chain solver]): `chain`'s search and reforward's first starting
// point. The best drop set it finds for `budget`, or nothing.
[[nodiscard]] std::optional<planner::context::evaluation> solve_chain(planner::context& ctx, std::size_t budget);

// The chain solver's segments (Note [Chain solver]), in order.
struct chain_segment {
  std::vector<std::uint32_t> internal;  // read by no later segment
  std::vector<std::uint32_t> outputs;   // read by later segments (the A node)
};
[[nodiscard]] std::vector<chain_segment> chain_segments(const candidate_set& cs);

// ---- solver_chen.cpp --------------------------------------------------------------------

// Chen's budgeted segmentation with its grid search (`chen`'s search and one of
// reforward's starting points): the cheapest grid plan within `budget`, or nothing.
[[nodiscard]] std::optional<planner::context::evaluation> solve_chen(planner::context& ctx, std::size_t budget);

// ---- solver_greedy.cpp ------------------------------------------------------------------

// How the greedy search ranks the candidates idle at the peak (Note [Cost-aware greedy]):
// by the bytes dropping one frees there (kept, it would hold round_up(size, 512)), or by
// its footprint once planned (its own pages). Per second of its recipe, either way.
enum class greedy_rank { bytes_freed, footprint };

// Greedy drop-set search (`greedy`'s search; reforward starts from both rankings).
[[nodiscard]] std::optional<planner::context::evaluation> solve_greedy(planner::context& ctx, std::size_t budget,
                                                                       greedy_rank rank = greedy_rank::bytes_freed);

// ---- offload_placement.cpp --------------------------------------------------------------

// One buffer to offload over its gap (evict_after, restore_before), its window to cover
// need_lo..need_hi where those are not `none` (where the planner needs its bytes out).
struct offload_request {
  buffer_id target = none;
  launch_id evict_after = none;
  launch_id restore_before = none;
  launch_id need_lo = none;
  launch_id need_hi = none;
  std::size_t bytes = 0;  // bytes its copies move; 0: the target's size (an offloaded pack's: its extent)
};

// Adds p.offloads for `requests` (Note [Offload placement]): release_before at the first
// launch the modelled device->host copy is done by, fetch_after as late as still hides
// the host->device copy, both widened to cover need_lo..need_hi.
void place_offloads(const iteration& it, const link_model& link, plan& p, std::span<const offload_request> requests);

// Moves each request's restore_before before the first recipe of `p` that reads its
// target inside its gap (Note [Offloaded recipe inputs]); a request left with no gap
// keeps its point, and the simulator refuses the plan.
void fetch_before_recipes(const iteration& it, const plan& p, std::span<offload_request> requests);

// Per launch of `it` under `p`'s recipes, without stalls: when it may start (its recipes
// run) and when it ends.
void launch_clock(const iteration& it, const plan& p, std::vector<double>& ready, std::vector<double>& end);

// Moves p's evict_after points later so that the copies to host run earliest deadline
// first (Note [Copies out by deadline]); `earliest` per offload: the last launch before
// its gap that uses its target. Nothing else of the plan changes.
void order_copies_out(const iteration& it, const link_model& link, plan& p, std::span<const launch_id> earliest);

// order_copies_out on `e`'s plan, kept where it still fits `budget` for less added time.
void order_copies_out_if_better(planner::context& ctx, std::size_t budget, planner::context::evaluation& e);

// Moves `e`'s fetches earlier so that each copy back would be done with (1 + margin) times
// its modelled time, where the plan still fits `budget` for no more added time (Note
// [Fetch margin]); margin <= 0 leaves the plan as it is.
void add_fetch_margin(planner::context& ctx, std::size_t budget, planner::context::evaluation& e, double margin);

// ---- solver_offload.cpp -----------------------------------------------------------------

// Keep/recompute/offload search (Note [Offload search]): the plan of least added time
// (recompute + stalls) it finds within `budget`, or nothing. Without `recompute`, no
// candidate is dropped (offload_mode::only). From `seed` (a drop set that fits) when given.
[[nodiscard]] std::optional<planner::context::evaluation> solve_offload(planner::context& ctx, std::size_t budget,
                                                                        bool recompute,
                                                                        const planner::context::evaluation* seed = nullptr);

// solve_offload without recompute, then its improvement pass with recompute allowed: a
// mix where no drop set leads to one that fits (Note [Offload search]).
[[nodiscard]] std::optional<planner::context::evaluation> solve_offload_then_recompute(planner::context& ctx,
                                                                                       std::size_t budget,
                                                                                       const planner::context::evaluation* seed);

// `larger`, a plan made for a larger budget, brought under `budget` one simulated change
// at a time, then improved (Note [Targets around the budget]); nothing where it does not
// come to fit.
[[nodiscard]] std::optional<planner::context::evaluation> solve_offload_from_larger(
    planner::context& ctx, std::size_t budget, const planner::context::evaluation& larger);

// ---- solver_offload_starts.cpp ----------------------------------------------------------

// The planner's recompute-only search: its plan at a budget on a context, or nothing.
using recompute_search =
    std::function<std::optional<planner::context::evaluation>(planner::context& ctx, std::size_t budget)>;
// With offload off: search's plan at `budget`. With offload only: solve_offload without
// recompute. With offload on: the cheapest (added time) of search's plan at `budget` and
// of solve_offload from it, from nothing, and from search's plans at larger budgets (Note
// [Offload search]), and, given `also`, from also's plans at the same budgets; run on
// planner::options::threads threads (Note [Parallel offload starts]).
[[nodiscard]] std::optional<planner::context::evaluation> with_offload(planner::context& ctx, std::size_t budget,
                                                                       const recompute_search& search,
                                                                       const recompute_search& also = {});

// ---- solver_offload_packs.cpp -----------------------------------------------------------

// Merges the requests that share a `packed` value other than `none` (one per request)
// into one request per offloaded pack (Note [Offload packs]): its first member in
// allocation order as the target, out over the gap all members share, moving their
// extent; `packs` gets each pack, in the order of the merged requests. False (with
// `error`) when members share no gap, are on different streams, or one has no
// allocation index.
[[nodiscard]] bool pack_requests(const iteration& it, std::vector<offload_request>& requests,
                                 const std::vector<std::uint32_t>& request_pack, std::vector<pack>& packs,
                                 std::string& error);

// Turns runs of small recomputed buffers of `best` into offloaded packs where the plan
// then fits for less added time (Note [Offload pack search]).
void pack_offloads(planner::context& ctx, std::size_t budget, planner::context::evaluation& best);

// ---- solver_tiered.cpp ------------------------------------------------------------------

// Tiered drop sets (Note [Tiered drop sets]): cheap internal activations dropped
// everywhere, every k-th segment output kept, the cheapest segments dropped whole; the
// cheapest fitting point of a small grid, or nothing.
[[nodiscard]] std::optional<planner::context::evaluation> solve_tiered(planner::context& ctx, std::size_t budget);
// The least peak over the grid's leanest points, the smallest budget solve_tiered meets
// (every fitting grid line fits at its leanest point); 0 when it has no plan.
[[nodiscard]] std::size_t tiered_least_peak(planner::context& ctx);

// ---- solver_multipass.cpp ---------------------------------------------------------------

// Two-level plans beyond drop sets (Note [Multi-pass]): the cheapest within `budget`, or
// nothing (also when ctx.multi_pass() is off).
[[nodiscard]] std::optional<planner::context::evaluation> solve_two_level(planner::context& ctx, std::size_t budget);
// The least peak over the same grid: solve_two_level meets a budget exactly when it is at
// least this. 0 when it has no plan or ctx.multi_pass() is off.
[[nodiscard]] std::size_t two_level_least_peak(planner::context& ctx);

// Plans beyond drop sets: the cheaper of solve_two_level and solve_multi_level, and the
// least budget either meets (0 when neither has a plan).
[[nodiscard]] std::optional<planner::context::evaluation> solve_multi_pass(planner::context& ctx, std::size_t budget);
[[nodiscard]] std::size_t multi_pass_least_peak(planner::context& ctx);
// Where `best` is a drop set that recomputes at least 3/4 of the forward pass, replaces it
// with the multi-level schedule for `budget` if that recomputes less (Note [Multi-pass]).
void prefer_multi_level(planner::context& ctx, std::size_t budget, std::optional<planner::context::evaluation>& best);

// ---- solver_multilevel.cpp --------------------------------------------------------------

// Multi-level schedules (Note [Multi-level schedules]): Rotor's dynamic program over the
// chain's segments, its memory level bisected against the simulator; the cheapest plan
// within `budget`, or nothing (also when ctx.multi_pass() is off). It meets a budget
// exactly when it is at least multi_level_least_peak (0: no plan).
[[nodiscard]] std::optional<planner::context::evaluation> solve_multi_level(planner::context& ctx, std::size_t budget);
[[nodiscard]] std::size_t multi_level_least_peak(planner::context& ctx);

}  // namespace sublinear::policy
