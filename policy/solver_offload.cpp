// Note [Offload search]
// Rationale: a copy costs no compute and can hide behind the launches in the gap, but the
//   link is shared, the host memory is bounded, and a copy that cannot hide stalls; so
//   neither "offload everything" nor "recompute everything" is right.
// Approach: the cost-aware greedy of Note [Cost-aware greedy] with a third action: at the
//   simulated peak each idle candidate gets its cheaper action, recompute (its recipe's
//   cost) or offload (the copy time the gap and the copies chosen cannot hide, priced
//   again as the link loads; not for buffers of less than half a page, which hold whole
//   pages while resident: Note [Offload pack search] packs those afterwards), best price
//   per byte first, until the excess is covered;
//   where nothing idle is left, a drop restored at the peak is offloaded instead (its
//   recipe's working set is the peak). Once the plan fits, each non-kept candidate tries
//   the other actions and keeps the change that lowers the simulated added time (compute
//   + stalls); where there are more candidates than that pass can try one at a time
//   (thousands on ResNet-1001), batches switch first (halved when they do not pay).
//   Starts: nothing, the recompute-only plan, and recompute plans at budgets 5%, 30% and
//   100% larger (Note [Offloaded recipe inputs]); `reforward` also starts from `greedy`'s
//   recompute plans at all four, whose looser drop sets the search turns into better
//   mixes on some graphs (ResNet-152 at 0.20x). From nothing and from each larger-budget
//   plan the peaks are also covered by offloads alone (no working set: `on` meets every
//   budget `only` meets). From nothing an offload chosen at a peak is out over the whole
//   run over the budget around it (far fewer rounds), launch by launch where that finds
//   no plan; `only` goes launch by launch first (fewer stalls where it fits). The stalls
//   left are repaired by keeping offloads, largest first, and covering the excess by
//   recompute (at most three passes, while they gain). Each start's plan then has its
//   windows tightened (Note [Tight windows]). The least added time wins, so with offload
//   on a plan never adds more than without.
// Limitations: greedy, so not optimal (deep cuts stay far from the floor:
//   docs/offload.md); only candidates (live across the turning point) are offloaded, once
//   each; the passes are bounded on large graphs.
//
// Note [Hopeless starts]
// Rationale: over a slow link a start from a recompute plan at a larger budget can meet
//   the budget by offloading the drops its recipes' working sets peak at, more copies
//   than the link carries: on the host device's link (4.5 ms a copy) ResNet-434 at 0.25x
//   ends such starts at 14-51 times the iteration's compute in stalls, after covers of
//   1,000-2,600 rounds (about a second of planning each). The pass after the cover tries
//   a bounded number of changes (76 there) and took back 1.5-6% of those stalls.
// Approach: a start that may recompute gives up (no plan) once its plan stalls longer
//   than eight times the iteration computes (traced durations, nothing planned) with
//   more offloads than that pass may try. On the recorded traces of docs/offload.md
//   ("Choosing") the starts whose plans came near the best never stalled more than
//   3.1 times the iteration in their covers; on ResNet-434 the others gave up within 210
//   rounds.
// Limitations: a heuristic, not a bound. On a small graph, where the pass can try every
//   offload, it has taken a plan back from over 8 iterations of stalls to 2, so the rule
//   waits for more offloads than trials. The starts from offloads alone never give up,
//   so `on` still meets every budget `only` meets.
//
// Note [Tight windows]
// Rationale: the windows an offload is asked to be out over (lo_, hi_) grow during the
//   search: a cover widens them over the run over the budget of the plan of that round,
//   and the improvement pass tries the whole gap. Later rounds take other buffers out,
//   so the plan found may ask for more than it needs, and a window that starts before
//   the copy to host is done, or ends too late to hide the copy back, stalls. On
//   ResNet-152 at 0.20x over 50 GB/s three such releases stalled 2.5 ms.
// Approach: once a start has its plan, and only if it stalls, each offload in candidate
//   order gets as its window the launches of its gap where the plan without it is over
//   the budget (placement still adds the window the link hides); the change stays when
//   the plan fits for less added time. Two evaluations per offload, within the
//   improvement pass's number of trials.
// Limitations: one pass, in candidate order; a window whose copy back cannot hide
//   because the budget needs the bytes out until late still stalls (ResNet-152 at 0.20x:
//   2.4 ms at one fetch), since no other buffer is asked to take its place.
#include <algorithm>
#include <cmath>
#include <limits>

#include "policy/recipe_reads.hpp"
#include "policy/solvers.hpp"

namespace sublinear::policy {

namespace {

using evaluation = planner::context::evaluation;

class offload_search {
 public:
  offload_search(planner::context& ctx, std::size_t budget, bool recompute)
      : ctx_(ctx), cs_(ctx.candidates()), it_(ctx.graph()), link_(ctx.offload().link), budget_(budget),
        recompute_(recompute) {
    const std::size_t k = cs_.size();
    actions_.assign(k, action::keep);
    lo_.assign(k, none);
    hi_.assign(k, none);
    forbidden_.assign(k, 0);
    start_.resize(it_.launches.size());
    double clock = 0.0;
    for (std::size_t i = 0; i < it_.launches.size(); ++i) {
      start_[i] = clock;
      clock += it_.launches[i].cost_s;
    }
    compute_s_ = clock;
    const std::size_t work = it_.launches.size() + k + 1;
    trials_ = std::max<std::size_t>(16, 500'000 / work);
  }

  std::optional<evaluation> run(const evaluation* seed) {
    evaluation current;
    if (seed != nullptr) {
      for (std::size_t c = 0; c < cs_.size(); ++c) {
        actions_[c] = c < seed->dropped.size() && seed->dropped[c] != 0 ? action::drop : action::keep;
      }
      horizons_ = seed->horizons;
      current = *seed;
    } else {
      current = evaluate();
    }
    for (std::size_t round = 0; !current.fits(budget_) && round < 2 * cs_.size() + 8; ++round) {
      if (!current.ok || hopeless(current)) return std::nullopt;
      if (!cover_peak(current)) break;
    }
    if (!current.fits(budget_) || hopeless(current)) return std::nullopt;
    switch_in_batches(current, action::drop, action::offload);
    improve(current);
    tighten(current);
    return current;
  }

  // A plan made for a larger budget brought under this one (Note [Targets around the
  // budget]): its actions and windows, one change at a time at the peak until it fits,
  // then the improvement passes.
  std::optional<evaluation> run_from_larger(const evaluation& larger) {
    const std::vector<action> actions = ctx_.actions_of(larger);
    const bool windows = larger.need_lo.size() == cs_.size() && larger.need_hi.size() == cs_.size();
    for (std::uint32_t c = 0; c < cs_.size(); ++c) {
      set(c, actions[c]);
      lo_[c] = windows ? larger.need_lo[c] : none;
      hi_[c] = windows ? larger.need_hi[c] : none;
    }
    horizons_ = larger.horizons;
    evaluation current = evaluate();
    for (int round = 0; round < 16 && current.ok && !current.fits(budget_); ++round) {
      if (!cover_by_trial(current)) break;
    }
    if (!current.fits(budget_)) return std::nullopt;
    improve(current);
    repair_stalls(current);
    tighten(current);
    return current;
  }

  // The changes at the peak, each simulated alone: a kept candidate dropped or offloaded,
  // a dropped one offloaded, an offload's window widened to the peak. Takes the one that
  // fits for the least added time; else the changes by added time per byte of peak they
  // take off, as many as cover the excess, together; else the best of those alone. False
  // where no change lowers the peak.
  bool cover_by_trial(evaluation& current) {
    const launch_id t = current.sim.peak_at;
    const std::size_t excess = current.sim.peak - budget_;
    const std::vector<launch_id> back = effective_restore(current.result);
    struct change {
      std::uint32_t c;
      action a;
      launch_id lo, hi;
      double rate;  // added time per byte of peak taken off
      std::size_t lowered;
    };
    const auto apply = [&](const change& x) {
      set(x.c, x.a);
      lo_[x.c] = x.lo;
      hi_[x.c] = x.hi;
    };
    const choices saved = choices_now();
    std::optional<evaluation> fitting;
    std::optional<change> fitting_change;
    std::vector<change> lowering;
    std::size_t trials = 4 * trials_;
    const auto trial = [&](change x) {
      apply(x);
      if (host_allows_now()) {
        evaluation e = evaluate();
        if (e.fits(budget_)) {
          if (!fitting || e.sim.added_time_s() < fitting->sim.added_time_s()) fitting = std::move(e), fitting_change = x;
        } else if (e.ok && e.sim.peak < current.sim.peak) {
          x.lowered = current.sim.peak - e.sim.peak;
          x.rate = std::max(0.0, e.sim.added_time_s() - current.sim.added_time_s()) / static_cast<double>(x.lowered);
          lowering.push_back(x);
        }
      }
      --trials;
      restore(saved);
    };
    for (std::uint32_t c = 0; c < cs_.size() && trials > 0; ++c) {
      if (!(cs_[c].evict_after < t && t < cs_[c].restore_before)) continue;
      const bool may_offload = forbidden_[c] == 0 && t < back[c];
      switch (actions_[c]) {
        case action::keep:
          if (recompute_) trial({c, action::drop, none, none, 0.0, 0});
          if (may_offload && trials > 0) trial({c, action::offload, t, t, 0.0, 0});
          break;
        case action::drop:
          if (may_offload) trial({c, action::offload, t, t, 0.0, 0});
          break;
        case action::offload: {
          const launch_id lo = lo_[c] == none ? t : std::min(lo_[c], t), hi = hi_[c] == none ? t : std::max(hi_[c], t);
          if (t < back[c] && (lo != lo_[c] || hi != hi_[c])) trial({c, action::offload, lo, hi, 0.0, 0});
          break;
        }
      }
    }
    if (fitting) {
      apply(*fitting_change);
      current = std::move(*fitting);
      return true;
    }
    if (lowering.empty()) return false;
    std::sort(lowering.begin(), lowering.end(), [](const change& x, const change& y) {
      return x.rate != y.rate ? x.rate < y.rate : x.lowered != y.lowered ? x.lowered > y.lowered : x.c < y.c;
    });
    std::vector<change> batch;  // the best change per candidate, until the excess is covered
    std::vector<std::uint8_t> in_batch(cs_.size(), 0);
    std::size_t covered = 0;
    for (const change& x : lowering) {
      if (covered >= excess) break;
      if (in_batch[x.c] != 0) continue;
      in_batch[x.c] = 1;
      batch.push_back(x);
      covered += x.lowered;
    }
    for (std::size_t taken = batch.size(); taken > 1; taken /= 2) {
      for (std::size_t k = 0; k < taken; ++k) apply(batch[k]);
      evaluation e = evaluate();
      if (host_allows_now() && e.ok && e.sim.peak < current.sim.peak - lowering.front().lowered) {
        current = std::move(e);
        return true;
      }
      restore(saved);
    }
    apply(lowering.front());
    current = evaluate();
    return true;
  }

  // Each offload in turn asks to be out only over the launches of its gap where the plan
  // without it is over the budget (Note [Tight windows]); the change stays where the plan
  // still fits for less added time.
  void tighten(evaluation& current) {
    if (current.sim.predicted_stall_s <= 0.0) return;
    std::vector<std::uint32_t> order;
    for (std::uint32_t c = 0; c < cs_.size(); ++c)
      if (actions_[c] == action::offload) order.push_back(c);
    std::size_t trials = trials_;
    for (std::uint32_t c : order) {
      if (trials < 2) break;
      const choices saved = choices_now();
      set(c, action::keep);
      lo_[c] = hi_[c] = none;
      evaluation without = evaluate();
      --trials;
      restore(saved);
      if (!without.ok) continue;
      const std::vector<std::size_t> during = ctx_.sim().timeline(without.result);
      const std::vector<launch_id> back = effective_restore(current.result);
      launch_id lo = none, hi = none;
      for (launch_id t = cs_[c].evict_after + 1; t < back[c] && t < during.size(); ++t) {
        if (during[t] <= budget_) continue;
        if (lo == none) lo = t;
        hi = t;
      }
      if (lo == lo_[c] && hi == hi_[c]) continue;
      lo_[c] = lo;
      hi_[c] = hi;
      evaluation e = evaluate();
      --trials;
      if (e.fits(budget_) && e.sim.added_time_s() < current.sim.added_time_s() * (1.0 - 1e-12)) {
        current = std::move(e);
      } else {
        restore(saved);
      }
    }
  }

  // Whether cover_peak asks an offload chosen or widened at a peak to be out over the
  // whole run of launches over the budget around it (Note [Offload search]).
  void widen(bool on) { widen_ = on; }

  // Whether a start that may recompute gives up (Note [Hopeless starts]): it stalls
  // longer than eight iterations compute, on more offloads than improve() may try.
  [[nodiscard]] bool hopeless(const evaluation& current) const {
    if (!recompute_ || !(current.sim.predicted_stall_s > 8.0 * compute_s_)) return false;
    return static_cast<std::size_t>(std::count(actions_.begin(), actions_.end(), action::offload)) > trials_;
  }

  // Candidates with action `from` take action `to` instead, in batches (most recompute
  // per byte first when offloading drops, least when dropping offloads): a batch stays
  // when the plan still fits for less added time, a batch that does not is halved, a
  // single candidate that does not is passed over. The one-at-a-time improvement pass
  // reaches few of the thousands of candidates of a deep cut on a large graph.
  void switch_in_batches(evaluation& current, action from, action to) {
    if (!offload_ || !recompute_) return;
    std::vector<std::uint32_t> order;
    for (std::uint32_t c = 0; c < cs_.size(); ++c) {
      if (actions_[c] == from && (to != action::offload || forbidden_[c] == 0)) order.push_back(c);
    }
    const auto per_byte = [&](std::uint32_t c) {
      return cs_[c].cost_s / static_cast<double>(std::max<std::size_t>(cs_[c].unplanned_bytes, 1));
    };
    if (order.size() <= trials_) return;  // the one-at-a-time pass reaches them all
    const bool dearest_first = to == action::offload;
    std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      const double pa = per_byte(a), pb = per_byte(b);
      return pa != pb ? (dearest_first ? pa > pb : pa < pb) : a < b;
    });
    std::size_t size = std::max<std::size_t>(1, order.size() / 8);
    std::size_t trials = 4 * trials_;
    for (std::size_t i = 0; i < order.size() && trials > 0;) {
      size = std::min(size, order.size() - i);
      const choices saved = choices_now();
      for (std::size_t j = i; j < i + size; ++j) set(order[j], to);
      bool taken = false;
      if (host_allows_now()) {
        evaluation e = evaluate();
        --trials;
        if (e.ok && e.fits(budget_) && e.sim.added_time_s() < current.sim.added_time_s() * (1.0 - 1e-12)) {
          current = std::move(e);
          taken = true;
        }
      }
      if (taken) {
        i += size;
        size *= 2;
      } else {
        restore(saved);
        if (size == 1) {
          ++i;
        } else {
          size /= 2;
        }
      }
    }
  }

  // The offload-only plan, then the improvement pass with recompute allowed: where no mix
  // from a drop set fits, offloading alone may, and recompute then takes over the copies
  // the link cannot hide.
  std::optional<evaluation> run_from_offload_only(const evaluation* seed) {
    const bool recompute = recompute_;
    recompute_ = false;
    std::optional<evaluation> current = run(seed);
    widen_ = false;
    recompute_ = recompute;
    if (current && recompute_) {
      switch_in_batches(*current, action::offload, action::drop);
      for (int pass = 0; pass < 3; ++pass) {
        const double before = current->sim.added_time_s();
        improve(*current);
        repair_stalls(*current);
        tighten(*current);
        if (!(current->sim.added_time_s() < before * (1.0 - 1e-9))) break;
      }
    }
    return current;
  }

  // Each offload in turn, largest first, is kept instead and the excess that leaves is
  // covered by recompute alone; the change stays when the plan fits for less added time.
  // An offload-first plan at a deep cut stalls on copies the link cannot carry in time.
  void repair_stalls(evaluation& current) {
    if (current.sim.predicted_stall_s <= 0.0) return;
    std::vector<std::uint32_t> order;
    for (std::uint32_t c = 0; c < cs_.size(); ++c) {
      if (actions_[c] == action::offload) order.push_back(c);
    }
    std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      return cs_[a].unplanned_bytes != cs_[b].unplanned_bytes ? cs_[a].unplanned_bytes > cs_[b].unplanned_bytes : a < b;
    });
    std::size_t trials = 4 * trials_;
    for (std::uint32_t c : order) {
      if (trials == 0) break;
      if (actions_[c] != action::offload) continue;
      const choices saved = choices_now();
      set(c, action::keep);
      lo_[c] = hi_[c] = none;
      evaluation e = evaluate();
      --trials;
      offload_ = false;
      for (std::size_t round = 0; e.ok && !e.fits(budget_) && round < 2 * cs_.size() + 8 && trials > 0; ++round, --trials) {
        if (!cover_peak(e)) break;
      }
      offload_ = true;
      if (e.fits(budget_) && e.sim.added_time_s() < current.sim.added_time_s() * (1.0 - 1e-12)) {
        current = std::move(e);
      } else {
        restore(saved);
      }
    }
  }

  // The search's choices, to try a change and take it back.
  struct choices {
    std::vector<action> actions;
    std::vector<launch_id> lo, hi;
    std::vector<std::uint8_t> forbidden;
    std::size_t host_used;
    double host_load_s, device_load_s;
  };
  [[nodiscard]] choices choices_now() const {
    return {actions_, lo_, hi_, forbidden_, host_used_, host_load_s_, device_load_s_};
  }
  void restore(const choices& c) {
    actions_ = c.actions;
    lo_ = c.lo;
    hi_ = c.hi;
    forbidden_ = c.forbidden;
    host_used_ = c.host_used;
    host_load_s_ = c.host_load_s;
    device_load_s_ = c.device_load_s;
  }

 private:
  evaluation evaluate() { return ctx_.evaluate_actions(actions_, lo_, hi_, horizons_); }

  [[nodiscard]] std::size_t pinned(std::uint32_t c) const {
    return round_up(it_.buffers[cs_[c].buffer].size, unplanned_rounding);
  }
  [[nodiscard]] bool host_allows(std::uint32_t c) const {
    const std::size_t cap = ctx_.offload().host_budget;
    return cap == 0 || host_used_ + pinned(c) <= cap;
  }
  // Copy time the gap and the copies already chosen leave unhidden (an estimate): out by
  // the turning point and back after it. Pricing at the peak being covered instead planned
  // slightly worse on the recorded traces (Transformer-8, ResNet-152).
  [[nodiscard]] double offload_price(std::uint32_t c) const {
    const candidate& cd = cs_[c];
    const std::size_t bytes = it_.buffers[cd.buffer].size;
    const launch_id turn = std::clamp<launch_id>(cs_.turning_point(), cd.evict_after + 1, cd.restore_before);
    const double end_e = start_[cd.evict_after] + it_.launches[cd.evict_after].cost_s;
    const double before = start_[turn] - end_e;
    const double after = start_[cd.restore_before] - start_[turn];
    return std::max(0.0, link_.to_host.copy_s(bytes) + host_load_s_ - before) +
           std::max(0.0, link_.to_device.copy_s(bytes) + device_load_s_ - after);
  }
  void set(std::uint32_t c, action a) {
    const std::size_t bytes = it_.buffers[cs_[c].buffer].size;
    const double sign_old = actions_[c] == action::offload ? -1.0 : 0.0;
    const double sign_new = a == action::offload ? 1.0 : 0.0;
    const double d = sign_old + sign_new;
    host_load_s_ += d * link_.to_host.copy_s(bytes);
    device_load_s_ += d * link_.to_device.copy_s(bytes);
    if (actions_[c] == action::offload) host_used_ -= pinned(c);
    if (a == action::offload) host_used_ += pinned(c);
    actions_[c] = a;
  }

  // Where each candidate must be back given the current plan's recipes (Note
  // [Offloaded recipe inputs]): its own next use, or the launch before the first recipe
  // that reads it inside its gap.
  std::vector<launch_id> effective_restore(const plan& p) const {
    std::vector<launch_id> back(cs_.size());
    for (std::uint32_t c = 0; c < cs_.size(); ++c) back[c] = cs_[c].restore_before;
    for_each_recipe_read(it_, p, [&](buffer_id x, launch_id t) {
      const std::uint32_t c = cs_.index_of(x);
      if (c != none && cs_[c].evict_after < t && t <= back[c]) back[c] = t - 1;
    });
    return back;
  }

  // Whether the candidate takes at least half of the pages it would hold offloaded. An
  // offloaded buffer holds whole pages while resident (offloads are not packed), so
  // offloading one of less than half a page frees its bytes in the gap and at least
  // doubles them for the rest of its life: the greedy cover does not choose those (the
  // passes that keep a change only when the simulated plan gains still may).
  [[nodiscard]] bool fills_its_pages(std::uint32_t c) const { return cs_[c].bytes <= 2 * cs_[c].unplanned_bytes; }

  // One greedy round at the peak; false when nothing is left to do there.
  bool cover_peak(evaluation& current) {
    const launch_id t = current.sim.peak_at;
    const std::size_t excess = current.sim.peak - budget_;
    const std::vector<launch_id> back = effective_restore(current.result);
    // The launches around t over the budget, over which an offload chosen or widened
    // here is asked to be out (widen()).
    launch_id run_lo = t, run_hi = t;
    if (widen_) {
      const std::vector<std::size_t> during = ctx_.sim().timeline(current.result);
      if (t < during.size()) {
        while (run_lo > 0 && during[run_lo - 1] > budget_) --run_lo;
        while (run_hi + 1 < during.size() && during[run_hi + 1] > budget_) ++run_hi;
      }
    }
    struct choice {
      std::uint32_t c;
      action a;
      double price;
    };
    // The cheaper action for a kept candidate at the current link load, if any.
    const auto best_action = [&](std::uint32_t c) -> std::optional<choice> {
      std::optional<choice> best;
      if (offload_ && forbidden_[c] == 0 && t < back[c] && host_allows(c) && fills_its_pages(c))
        best = choice{c, action::offload, offload_price(c)};
      if (recompute_ && (!best || cs_[c].cost_s < best->price)) best = choice{c, action::drop, cs_[c].cost_s};
      return best;
    };
    const auto ratio = [&](const choice& x) {
      return x.price / static_cast<double>(std::max<std::size_t>(cs_[x.c].unplanned_bytes, 1));
    };
    // A min-heap by price per byte, larger and then lower-numbered candidates first.
    const auto after = [&](const choice& x, const choice& y) {
      const double rx = ratio(x), ry = ratio(y);
      if (rx != ry) return rx > ry;
      return cs_[x.c].unplanned_bytes != cs_[y.c].unplanned_bytes ? cs_[x.c].unplanned_bytes < cs_[y.c].unplanned_bytes
                                                                  : x.c > y.c;
    };
    std::vector<choice> heap;
    for (std::uint32_t c = 0; c < cs_.size(); ++c) {
      const candidate& cd = cs_[c];
      if (!(cd.evict_after < t && t < cd.restore_before)) continue;
      if (actions_[c] == action::offload) {
        // Offloaded, but its window misses the peak: widen it there (if it can be out).
        if (t < back[c] && (lo_[c] == none || t < lo_[c] || t > hi_[c])) heap.push_back({c, action::offload, 0.0});
        continue;
      }
      if (actions_[c] != action::keep) continue;
      if (std::optional<choice> best = best_action(c)) heap.push_back(*best);
    }
    if (heap.empty() && offload_) {
      // Nothing idle is left to take out here: the peak is recipes' working sets. A
      // dropped buffer restored here comes back by copy instead, without its recipe.
      for (const eviction& ev : current.result.evictions) {
        if (ev.restore_before != t && ev.restore_before != t + 1) continue;
        const std::uint32_t c = cs_.index_of(ev.target);
        if (c == none || actions_[c] != action::drop || forbidden_[c] != 0 || !host_allows(c)) continue;
        if (!(cs_[c].evict_after < t && t <= back[c])) continue;
        heap.push_back({c, action::offload, offload_price(c)});
      }
    }
    if (heap.empty()) return false;
    std::make_heap(heap.begin(), heap.end(), after);
    std::size_t freed = 0;
    std::vector<std::uint32_t> batch;
    while (!heap.empty() && freed < excess) {
      std::pop_heap(heap.begin(), heap.end(), after);
      const choice ch = heap.back();
      heap.pop_back();
      if (actions_[ch.c] == action::drop) {
        set(ch.c, action::offload);
      } else if (actions_[ch.c] == action::keep) {
        // Offload prices rise with the copies chosen since: price it again, and take it
        // only if it still comes first (prices never fall within a round).
        const std::optional<choice> now = best_action(ch.c);
        if (!now) continue;
        if (now->a != ch.a || now->price > ch.price) {
          if (!heap.empty() && after(*now, heap.front())) {
            heap.push_back(*now);
            std::push_heap(heap.begin(), heap.end(), after);
            continue;
          }
        }
        set(ch.c, now->a);
      }
      const launch_id wlo = std::min(t, std::max<launch_id>(run_lo, cs_[ch.c].evict_after + 1));
      const launch_id whi = std::max(t, std::min<launch_id>(run_hi, back[ch.c] - 1));
      lo_[ch.c] = lo_[ch.c] == none ? wlo : std::min(lo_[ch.c], wlo);
      hi_[ch.c] = hi_[ch.c] == none ? whi : std::max(hi_[ch.c], whi);
      batch.push_back(ch.c);
      freed += cs_[ch.c].bytes;
    }
    if (batch.empty()) return false;
    evaluation e = evaluate();
    if (!e.ok) {
      // An offload in this batch broke a rule (a recipe reads it in place, or the host
      // budget): offer those candidates the other actions only.
      for (std::uint32_t c : batch) {
        if (actions_[c] != action::offload) continue;
        forbidden_[c] = 1;
        set(c, recompute_ ? action::drop : action::keep);
      }
      e = evaluate();
    }
    current = std::move(e);
    return true;
  }

  // Each non-kept candidate tries the other actions; keeps the change that lowers the
  // added time (keep: that does not raise it).
  void improve(evaluation& current) {
    std::vector<std::uint32_t> order;
    for (std::uint32_t c = 0; c < cs_.size(); ++c) {
      if (actions_[c] != action::keep) order.push_back(c);
    }
    const auto price = [&](std::uint32_t c) { return actions_[c] == action::drop ? cs_[c].cost_s : offload_price(c); };
    std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      const double pa = price(a), pb = price(b);
      return pa != pb ? pa > pb : a < b;
    });
    std::size_t trials = trials_;
    for (std::uint32_t c : order) {
      if (trials == 0) break;
      const action was = actions_[c];
      const launch_id was_lo = lo_[c], was_hi = hi_[c];
      struct option {
        action a;
        launch_id lo, hi;
      };
      std::vector<option> options{{action::keep, none, none}};
      if (was == action::drop && forbidden_[c] == 0) {
        options.push_back({action::offload, none, none});
        options.push_back({action::offload, cs_[c].evict_after + 1, cs_[c].restore_before - 1});
      }
      if (was == action::offload && recompute_) options.push_back({action::drop, none, none});
      if (was == action::offload && was_lo != none) options.push_back({action::offload, none, none});
      std::optional<evaluation> best;
      std::optional<option> chosen;
      for (const option& o : options) {
        if (trials == 0) break;
        --trials;
        set(c, o.a);
        lo_[c] = o.lo;
        hi_[c] = o.hi;
        if (o.a == action::offload && !host_allows_now()) {
          set(c, was);
          continue;
        }
        evaluation e = evaluate();
        const double bar = best ? best->sim.added_time_s() : current.sim.added_time_s();
        const bool better = o.a == action::keep && !best ? e.sim.added_time_s() <= bar : e.sim.added_time_s() < bar * (1.0 - 1e-12);
        if (e.fits(budget_) && better) {
          best = std::move(e);
          chosen = o;
        }
        set(c, was);
      }
      if (chosen) {
        set(c, chosen->a);
        lo_[c] = chosen->lo;
        hi_[c] = chosen->hi;
        current = std::move(*best);
      } else {
        lo_[c] = was_lo;
        hi_[c] = was_hi;
      }
    }
  }
  [[nodiscard]] bool host_allows_now() const {
    const std::size_t cap = ctx_.offload().host_budget;
    return cap == 0 || host_used_ <= cap;
  }

  planner::context& ctx_;
  const candidate_set& cs_;
  const iteration& it_;
  const link_model& link_;
  const std::size_t budget_;
  bool recompute_;
  bool offload_ = true;  // cover_peak may choose offload
  bool widen_ = false;   // see widen()
  std::vector<action> actions_;
  std::vector<launch_id> lo_, hi_;
  std::vector<launch_id> horizons_;  // the seed's (Note [Multi-pass]); empty: none
  std::vector<std::uint8_t> forbidden_;
  std::vector<double> start_;  // launch start times, nothing planned
  double compute_s_ = 0.0;     // the iteration's compute, nothing planned
  std::size_t host_used_ = 0;
  double host_load_s_ = 0.0, device_load_s_ = 0.0;
  std::size_t trials_ = 16;
};

}  // namespace

std::optional<evaluation> solve_offload(planner::context& ctx, std::size_t budget, bool recompute,
                                        const evaluation* seed) {
  if (ctx.offload().mode == offload_mode::off || !ctx.offload().link.usable()) return std::nullopt;
  offload_search search(ctx, budget, recompute);
  std::optional<evaluation> found = search.run(seed);
  if (found || recompute || seed != nullptr) return found;
  // Offloads alone from nothing (`only`): launch by launch first, which stalls less where
  // it fits; where that finds no plan, each offload out over the whole run at once.
  offload_search wide(ctx, budget, false);
  wide.widen(true);
  return wide.run(nullptr);
}

std::optional<evaluation> solve_offload_from_larger(planner::context& ctx, std::size_t budget,
                                                  const evaluation& larger) {
  if (ctx.offload().mode == offload_mode::off || !ctx.offload().link.usable()) return std::nullopt;
  offload_search search(ctx, budget, true);
  return search.run_from_larger(larger);
}

std::optional<evaluation> solve_offload_then_recompute(planner::context& ctx, std::size_t budget,
                                                       const evaluation* seed) {
  if (ctx.offload().mode == offload_mode::off || !ctx.offload().link.usable()) return std::nullopt;
  offload_search search(ctx, budget, true);
  if (seed != nullptr) return search.run_from_offload_only(seed);
  // From nothing: each offload out over the whole run at once, which takes far fewer
  // rounds; where that finds no plan, launch by launch (so this meets what `only` meets).
  search.widen(true);
  std::optional<evaluation> found = search.run_from_offload_only(nullptr);
  if (found) return found;
  offload_search narrow(ctx, budget, true);
  return narrow.run_from_offload_only(nullptr);
}

}  // namespace sublinear::policy
