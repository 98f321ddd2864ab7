// Measuring the sweeps' points: training runs, the probe, budgets chosen from it, and a
// group of runs side by side. Note [Remat sweeps] in measure.hpp says how.
#include "integrations/cli/bench/measure.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include "policy/budget.hpp"
#include "runtime/host/host_runtime.hpp"
#include "sublinear/error.hpp"
#include "tracer/analysis.hpp"
#include "tracer/events.hpp"
#include "workloads/paired.hpp"
#include "workloads/training.hpp"

namespace sublinear::cli::bench {

std::int64_t warmup_iterations() { return runtime::settings{}.trace_iterations + 1; }

// ---- small helpers ------------------------------------------------------------------------

double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double loglog_slope(const std::vector<double>& xs, const std::vector<double>& ys) {
  const double n = static_cast<double>(xs.size());
  if (xs.size() < 2) return std::numeric_limits<double>::quiet_NaN();
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double x = std::log(xs[i]), y = std::log(ys[i]);
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double d = n * sxx - sx * sx;
  return d == 0.0 ? std::numeric_limits<double>::quiet_NaN() : (n * sxy - sx * sy) / d;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string mib(std::size_t bytes) { return fmt("%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

std::string ratio_text(double v) { return std::isfinite(v) && v > 0.0 ? fmt("%.2fx", v) : "-"; }

policy::budget_spec bytes_budget(std::size_t bytes) { return policy::parse_budget(std::to_string(bytes)); }

wl::host_session_options session_options() {
  wl::host_session_options o;
  // Host-sized size classes (Note [Host size classes]): PyTorch's 2 MiB and 20 MiB
  // segments would turn every mapped figure into a staircase of 2 MiB steps.
  o.scaled_size_classes = true;
  return o;
}

std::string key_of(const std::string& label) {
  std::string k;
  for (char c : label) {
    const bool word = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (word) k += c;
    else if (!k.empty() && k.back() != '_') k += '_';
  }
  while (!k.empty() && k.back() == '_') k.pop_back();
  return k;
}

std::string point_name(const models::model_config& c) {
  const auto kind = std::string(models::to_string(c.kind));
  return kind + "-" + std::to_string(models::uses_depth(c.kind) ? c.depth : c.seq_len);
}

// ---- one training run ------------------------------------------------------------------------

namespace {

// Thrown from the iteration hook to end a run whose budget got no plan: the rest of it
// would only measure plain caching.
struct stop_after_trace {};

// Note [Paired timing] is in workloads/paired.hpp.

struct raw_run {
  wl::training_figures figures;
  std::vector<runtime::iteration_report> reports;
  std::vector<std::vector<float>> params;
  std::vector<double> cpu_s;  // per iteration: CPU seconds from the end of the previous one
  std::string plan_error;
  std::size_t budget = 0;
  double planning_s = 0.0;
  bool stopped = false;
  std::string failure;  // an exception escaped the training loop
};

// Trains `config` for `iterations` steps in a fresh host session: without sublinear when
// `policy` is empty, otherwise under the replay engine with that planner and budget.
// With a pacer, takes turns with the other side (Note [Paired timing]); `side` 1 is the
// baseline twin.
raw_run train_run(const models::model_config& config, const std::string& policy,
                  const std::optional<policy::budget_spec>& budget, std::int64_t iterations, runtime::log_level log,
                  bool multi_pass, wl::pacer* pace = nullptr, int side = 0) {
  wl::pacer::turns turns(pace, side);  // before the session: the turn passes once it is gone
  raw_run out;
  wl::host_session_options so = session_options();
  so.install_default = pace == nullptr;
  wl::host_session session(so);
  // The allocator configured as the engine configures it (exact segments for large
  // allocations), for the baseline too: memory differences are then recomputation's alone.
  session.allocator().set_exact_large_segments(true);
  wl::context ctx = session.make_context();
  auto m = models::make_model(config);
  m->init(ctx, kSeed);  // the engine starts once the model exists, as in a framework
  std::unique_ptr<runtime::host_runtime> rt;
  if (!policy.empty()) {
    runtime::engine_options eo;
    eo.config.budget = budget;
    eo.config.policy = policy;
    eo.config.multi_pass = multi_pass;
    eo.config.log = log;  // error by default: infeasible budgets are reported by the sweep
    eo.device_capacity = session.vmm().physical_capacity();
    // Traced unbudgeted, as the probe traces: the byte budgets here come from the probe's
    // planning, and a trace held under a byte budget (Note [Offloading the traced
    // iteration]) places blocks differently and shows the planner a larger cache (ResNet-218:
    // 23.25 MiB mapped against 20.00 MiB unbudgeted), so the run would refuse budgets the
    // probe found feasible. Only planned iterations are measured either way.
    eo.budget_traced_iterations = false;
    rt = std::make_unique<runtime::host_runtime>(session.device(), session.allocator(), eo);
  }
  wl::training_options t;
  t.iterations = iterations;
  t.seed = kSeed;
  // The CPU clock is read around the hook, so planning at the marker is not counted; what
  // is counted besides the step is making the next batch, the same in every run.
  double cpu_mark = process_cpu_s();
  t.on_iteration_end = [&](const wl::iteration_figures& f) {
    out.cpu_s.push_back(process_cpu_s() - cpu_mark);
    if (rt) {
      const bool tracing = rt->get().state() == runtime::engine_state::trace;
      const auto started = clock_type::now();
      rt->mark_iteration();
      if (tracing && rt->get().state() != runtime::engine_state::trace) {  // it planned at this marker
        out.planning_s = seconds_since(started);
        if (!rt->get().plan_error().empty()) throw stop_after_trace{};
      }
    }
    turns.after_iteration(f.index, iterations);
    if (side == 1 && turns.caught_up_with_finished()) throw stop_after_trace{};
    cpu_mark = process_cpu_s();
  };
  try {
    out.figures = wl::train(ctx, *m, t);
    out.params = wl::download_parameters(ctx, *m);
  } catch (const stop_after_trace&) {
    out.stopped = true;
  } catch (const std::exception& e) {
    out.failure = e.what();
  }
  if (rt) {
    out.reports = rt->get().iterations();
    out.budget = rt->get().budget();
    out.plan_error = rt->get().plan_error();
  }
  return out;
}

// A planned run and its baseline twin, taking turns iteration by iteration (Note [Paired
// timing]). Returns the run; the twin's figures come back in `twin`.
raw_run paired_run(const models::model_config& config, const std::string& policy,
                   const std::optional<policy::budget_spec>& budget, std::int64_t iterations, runtime::log_level log,
                   bool multi_pass, raw_run& twin) {
  wl::pacer pace;
  std::thread other([&] {
    try {
      twin = train_run(config, "", std::nullopt, iterations, log, true, &pace, 1);
    } catch (const std::exception& e) {
      twin.failure = e.what();
    }
  });
  raw_run run;
  try {
    run = train_run(config, policy, budget, iterations, log, multi_pass, &pace, 0);
  } catch (const std::exception& e) {
    run.failure = e.what();
  }
  other.join();
  return run;
}
}  // namespace

// ---- the probe ----------------------------------------------------------------------------------

probe_result run_probe(const models::model_config& config) {
  wl::host_session session(session_options());
  wl::context ctx = session.make_context();
  auto m = models::make_model(config);
  m->init(ctx, kSeed);
  runtime::engine_options eo;
  eo.config.log = runtime::log_level::error;  // no budget: the engine only traces
  eo.device_capacity = session.vmm().physical_capacity();
  runtime::host_runtime rt(session.device(), session.allocator(), eo);
  // As the engine does at its markers (engine.cpp, the TRACE case): the earlier traced
  // iterations contribute the parameter slots their kernels were seen writing through,
  // the last one is analysed and planned from.
  const std::int64_t traced = std::max(1, eo.config.trace_iterations);
  tracer::analysis_options ao;
  ao.granularity = session.allocator().granularity();
  tracer::analysed_iteration an;
  std::size_t mapped_peak = 0;
  wl::training_options t;
  t.iterations = traced;
  t.seed = kSeed;
  t.on_iteration_end = [&](const wl::iteration_figures& f) {
    const tracer::trace snapshot = rt.recorder().snapshot();  // before the marker, as the engine sees it
    an = tracer::analyse(snapshot, tracer::event_range{0, snapshot.events.size()}, ao);
    ao.known_writing_slots = an.writing_slots;
    mapped_peak = f.peak_mapped_bytes;
    rt.mark_iteration();
  };
  (void)wl::train(ctx, *m, t);
  probe_result p;
  p.graph = std::move(an.graph);
  p.mapped_peak = mapped_peak;
  p.forward_launches = p.graph.turning_point;
  for (std::size_t i = 0; i < p.graph.turning_point && i < p.graph.launches.size(); ++i) {
    p.forward_s += p.graph.launches[i].cost_s;
  }
  return p;
}

// ---- budgets chosen from the probe ----------------------------------------------------------------

namespace {

// A plan at `budget` (planner bytes), or nothing when the planner cannot meet it.
std::optional<policy::plan> try_plan(const policy::planner& pl, const policy::iteration& g, std::size_t budget,
                                     const policy::planner::options& o = {}) {
  try {
    return pl.make_plan(g, budget, o);
  } catch (const config_error&) {  // infeasible_budget, or a planner that gives up
    return std::nullopt;
  }
}


// The planner's smallest feasible budget, in planner bytes (0 with `error` set if the
// planner failed otherwise).
std::size_t smallest_planner_budget(const policy::planner& pl, const probe_result& p, std::string& error,
                                    const policy::planner::options& o = {}) {
  try {
    return pl.make_plan(p.graph, 1, o).predicted_peak;  // nothing fits in one byte; a planner may still say so
  } catch (const policy::infeasible_budget& e) {
    return e.smallest_feasible();
  } catch (const std::exception& e) {
    error = e.what();
    return 0;
  }
}

// A feasible choice: what a run asks for (`budget`) and what `plan` predicts there.
void fill_choice(budget_choice& c, const probe_result& p, const policy::plan& plan, std::size_t budget,
                 std::size_t smallest) {
  c.feasible = true;
  c.budget = budget;
  c.predicted_peak = plan.predicted_peak + policy::cache_allowance(p.traced(), budget, p.allowance_at(budget, smallest));
  c.extra_compute = p.forward_s > 0.0 ? plan.added_compute_s / p.forward_s : -1.0;
}

}  // namespace

budget_choice choose_budget(const probe_result& p, std::string_view planner, bool one_forward,
                            const policy::planner::options& o, double forwards) {
  budget_choice c;
  const auto pl = policy::make_planner(planner);
  const std::size_t smallest = smallest_planner_budget(*pl, p, c.error, o);
  if (smallest == 0) return c;
  c.smallest = p.user_budget(smallest, smallest);
  // The reported smallest is what the planner's search found; step up a little if a plan
  // at exactly that budget is refused.
  std::size_t at = smallest;
  std::optional<policy::plan> plan;
  for (int tries = 0; tries < 4 && !plan; ++tries) {
    plan = try_plan(*pl, p.graph, at, o);
    if (!plan) at += std::max<std::size_t>(p.graph.granularity, at / 100);
  }
  if (!plan) {
    c.error = "no plan at its own smallest feasible budget";
    return c;
  }
  const auto within = [&](const policy::plan& q) { return q.added_compute_s <= forwards * p.forward_s * (1.0 + 1e-9); };
  if (one_forward && !within(*plan)) {
    std::size_t lo = at;
    std::size_t hi = std::max(at, p.graph.peak_bytes);
    std::optional<policy::plan> best = try_plan(*pl, p.graph, hi, o);
    if (best && within(*best)) {
      const std::size_t step = std::max<std::size_t>(p.graph.granularity, hi / 64);  // ~1.5% of the peak
      while (hi - lo > step) {
        const std::size_t mid = lo + (hi - lo) / 2;
        auto q = try_plan(*pl, p.graph, mid, o);
        if (q && within(*q)) {
          hi = mid;
          best = std::move(q);
        } else {
          lo = mid;
        }
      }
      at = hi;
      plan = std::move(best);
    }
  }
  fill_choice(c, p, *plan, p.user_budget(at, smallest), smallest);
  return c;
}

std::string choose_best_planner(const probe_result& p, const std::string& where, std::vector<std::string>& notes,
                                const progress_fn& progress) {
  struct candidate {
    std::string name;
    std::size_t smallest = 0;
    budget_choice choice;
  };
  std::vector<candidate> cands;
  for (auto name : policy::planner_names()) {
    if (name == "none" || name == "sqrtn") continue;
    if (progress) progress("choosing the planner at " + where + ": smallest feasible budget of " + std::string(name));
    std::string error;
    const auto pl = policy::make_planner(name);
    const std::size_t s = smallest_planner_budget(*pl, p, error);
    if (s > 0) cands.push_back({std::string(name), p.user_budget(s, s), {}});
  }
  if (cands.empty()) throw error("no planner could plan " + where);
  std::size_t lowest = cands.front().smallest;
  for (const auto& c : cands) lowest = std::min(lowest, c.smallest);
  // Close calls are settled on the budget actually used: <= 1 extra forward.
  std::string best;
  std::size_t best_peak = 0;
  double best_extra = 0.0;
  std::string line = "planner choice at " + where + " (smallest feasible budget):";
  for (auto& c : cands) {
    line += " " + c.name + " " + mib(c.smallest) + ";";
    if (static_cast<double>(c.smallest) > 1.05 * static_cast<double>(lowest)) continue;
    if (progress) progress("choosing the planner at " + where + ": budget for <= 1 extra forward of " + c.name);
    c.choice = choose_budget(p, c.name, true);
    if (!c.choice.feasible) continue;
    if (best.empty() || c.choice.predicted_peak < best_peak ||
        (c.choice.predicted_peak == best_peak && c.choice.extra_compute < best_extra)) {
      best = c.name;
      best_peak = c.choice.predicted_peak;
      best_extra = c.choice.extra_compute;
    }
  }
  if (best.empty()) best = cands.front().name;
  notes.push_back(line + " within 5% of the lowest, the lowest predicted peak at <= 1 extra forward wins: " + best);
  return best;
}

budget_choice choose_budget_of(const probe_result& p, std::string_view planner, std::size_t budget,
                               const policy::planner::options& o) {
  budget_choice c;
  const auto pl = policy::make_planner(planner);
  const std::size_t smallest = smallest_planner_budget(*pl, p, c.error, o);
  if (smallest == 0) return c;
  c.smallest = p.user_budget(smallest, smallest);
  const auto plan = try_plan(*pl, p.graph, p.planner_share(budget, smallest), o);
  if (!plan) {
    c.error = "no plan at " + mib(budget) + " (the smallest feasible budget is " + mib(c.smallest) + ")";
    return c;
  }
  fill_choice(c, p, *plan, budget, smallest);
  return c;
}

budget_choice choose_budget_at(const probe_result& p, std::string_view planner, const budget_choice& at) {
  if (!at.feasible) {
    budget_choice c;
    c.error = at.error;
    return c;
  }
  return choose_budget_of(p, planner, at.budget);
}

budget_choice choose_budget_for_cut(const probe_result& p, std::string_view planner, double cut,
                                    const policy::planner::options& o) {
  const std::size_t page = std::max<std::size_t>(p.graph.granularity, 1);
  const auto budget = static_cast<std::size_t>((1.0 - cut) * static_cast<double>(p.mapped_peak)) / page * page;
  return choose_budget_of(p, planner, budget, o);
}

smallest_fn probe_smallest(const probe_result& p) {
  auto cache = std::make_shared<std::map<std::string, std::size_t>>();
  return [&p, cache](const std::string& planner) {
    if (auto it = cache->find(planner); it != cache->end()) return it->second;
    std::string error;
    const std::size_t s = smallest_planner_budget(*policy::make_planner(planner), p, error);
    return (*cache)[planner] = s > 0 ? p.user_budget(s, s) : 0;
  };
}

// ---- a group of runs, side by side --------------------------------------------------------------

namespace {

// The smallest feasible budget the engine's message names ("... the smallest feasible
// budget for it is 5.83 MiB; ..."), or 0 when the message says none in a form
// parse_budget reads. The run's own figure, from its own trace, is the one to show; the
// probe's is the fallback.
std::size_t smallest_in_message(const std::string& message) {
  constexpr std::string_view key = "smallest feasible budget for it is ";
  const std::size_t at = message.find(key);
  if (at == std::string::npos) return 0;
  const std::size_t from = at + key.size();
  const std::size_t to = message.find_first_of(";(", from);
  std::string text = message.substr(from, to == std::string::npos ? std::string::npos : to - from);
  while (!text.empty() && (text.back() == ' ' || text.back() == '.')) text.pop_back();
  try {
    const auto spec = policy::parse_budget(text);
    return spec.form == policy::budget_spec::kind::bytes ? spec.bytes : 0;
  } catch (const config_error&) {
    return 0;
  }
}

struct run_state {
  run_plan plan;
  run_result result;
  bool done = false;  // infeasible or failed: not run again
  std::vector<double> planning;
};

}  // namespace

std::vector<run_result> measure_group(const models::model_config& config, const std::vector<run_plan>& plans,
                                      const group_settings& gs, std::size_t forward_launches,
                                      const smallest_fn& smallest_for) {
  const std::int64_t warmup = warmup_iterations();
  const std::int64_t iterations = warmup + gs.iterations;
  const std::size_t capacity = wl::host_session_options{}.physical_capacity;
  const std::string where = point_name(config);
  std::vector<run_state> states(plans.size());
  for (std::size_t i = 0; i < plans.size(); ++i) {
    states[i].plan = plans[i];
    auto& r = states[i].result;
    r.label = plans[i].label;
    r.policy = plans[i].policy;
    r.budget_rule = plans[i].rule;
    r.predicted_extra_compute = plans[i].predicted_extra;
    r.status = "ok";
    r.params_bit_identical = true;
    r.within_budget = true;
  }
  std::vector<std::vector<float>> baseline_params;
  for (std::int64_t round = 0; round < gs.repeats; ++round) {
    for (auto& st : states) {
      if (st.done) continue;
      auto& r = st.result;
      const auto started = clock_type::now();
      // A planned run trains beside its baseline twin (Note [Paired timing]).
      raw_run twin;
      const auto run = [&](const std::optional<policy::budget_spec>& budget) {
        return st.plan.policy.empty()
                   ? train_run(config, "", std::nullopt, iterations, gs.log, st.plan.multi_pass)
                   : paired_run(config, st.plan.policy, budget, iterations, gs.log, st.plan.multi_pass, twin);
      };
      raw_run raw = run(st.plan.budget);
      const auto infeasible = [&] {
        return !st.plan.policy.empty() && raw.failure.empty() && raw.plan_error.find("infeasible") != std::string::npos;
      };
      for (double more : {1.02, 1.05}) {
        if (st.plan.retry_bytes == 0 || !infeasible()) break;
        const auto bytes = static_cast<std::size_t>(static_cast<double>(st.plan.retry_bytes) * more);
        if (gs.progress && *gs.progress) {
          (*gs.progress)(gs.sweep + " " + where + ": " + r.label + " infeasible at run time, retrying at " + mib(bytes));
        }
        raw = run(bytes_budget(bytes));
        if (!infeasible()) {
          st.plan.budget = bytes_budget(bytes);
          st.plan.retry_bytes = 0;  // later rounds use the budget that worked
          r.budget_rule += fmt(", +%.0f%% at run time", 100.0 * (more - 1.0));
        }
      }
      const std::size_t traced_peak = raw.reports.empty() ? 0 : raw.reports.front().peak_mapped;
      const auto resolved = [&] {
        if (!st.plan.budget) return std::size_t{0};
        try {
          return policy::resolve_budget(*st.plan.budget, capacity, traced_peak);
        } catch (const config_error&) {
          return std::size_t{0};
        }
      };
      if (!raw.failure.empty()) {
        r.status = "failed";
        r.error = raw.failure;
        r.budget_bytes = raw.budget > 0 ? raw.budget : resolved();
        r.traced_peak_bytes = traced_peak;
        st.done = true;
      } else if (!st.plan.policy.empty() && !raw.plan_error.empty() && infeasible() && r.rounds > 0) {
        // Planned in an earlier round, refused now (plans follow the traced durations):
        // keep the rounds that ran, say so, run it no more.
        r.error = raw.plan_error;
        r.budget_rule += ", refused in round " + std::to_string(round + 1);
        st.done = true;
      } else if (!st.plan.policy.empty() && !raw.plan_error.empty()) {
        r.status = infeasible() ? "infeasible" : "failed";
        r.error = raw.plan_error;
        r.smallest_feasible_bytes = smallest_in_message(raw.plan_error);
        if (r.smallest_feasible_bytes == 0 && smallest_for) r.smallest_feasible_bytes = smallest_for(st.plan.policy);
        r.traced_peak_bytes = traced_peak;
        r.budget_bytes = resolved();
        st.done = true;
      }
      if (gs.progress && *gs.progress) {
        std::string line = gs.sweep + " " + where + ": " + r.label + (r.policy.empty() ? "" : " (" + r.budget_rule + ")") +
                           ", round " + std::to_string(round + 1) + "/" + std::to_string(gs.repeats) + ": ";
        line += r.status != "ok" ? r.status : st.done ? "infeasible this round" : "done";
        line += fmt(" in %.1f s", seconds_since(started));
        (*gs.progress)(line);
      }
      if (st.done) continue;

      const auto& f = raw.figures;
      r.rounds += 1;
      r.persistent_bytes = f.persistent_bytes;
      if (st.plan.policy.empty()) {
        r.peak_bytes = std::max(r.peak_bytes, f.peak_mapped_bytes());
        r.resident_feature_map_bytes = std::max(r.resident_feature_map_bytes, f.feature_map_bytes());
        for (std::size_t i = warmup; i < f.iterations.size(); ++i) {
          r.iteration_s.push_back(f.iterations[i].seconds);
          if (i < raw.cpu_s.size()) r.iteration_cpu_s.push_back(raw.cpu_s[i]);
        }
        if (baseline_params.empty()) baseline_params = raw.params;
      } else {
        r.traced_peak_bytes = traced_peak;
        r.budget_bytes = raw.budget;
        st.planning.push_back(raw.planning_s);
        std::size_t steady = 0, evictions = 0, recomputed = 0;
        for (std::size_t i = 0; i < raw.reports.size(); ++i) {
          const auto& rep = raw.reports[i];
          if (rep.state == runtime::engine_state::trace) continue;
          r.peak_bytes = std::max(r.peak_bytes, rep.peak_mapped);
          if (i < f.iterations.size()) {
            r.resident_feature_map_bytes = std::max(r.resident_feature_map_bytes, f.iterations[i].feature_map_bytes);
          }
          if (rep.budget > 0 && rep.peak_mapped > rep.budget) r.within_budget = false;
          r.validation_mismatches += rep.validation_mismatches;
          if (rep.diverged) r.diverged_iterations += 1;
          if (rep.state != runtime::engine_state::steady || rep.diverged || i < static_cast<std::size_t>(warmup))
            continue;
          if (i < f.iterations.size()) r.iteration_s.push_back(f.iterations[i].seconds);
          if (i < raw.cpu_s.size()) r.iteration_cpu_s.push_back(raw.cpu_s[i]);
          const auto& tw = twin.figures.iterations;
          if (i < f.iterations.size() && i < tw.size() && tw[i].seconds > 0.0)
            r.paired_wall.push_back(f.iterations[i].seconds / tw[i].seconds);
          if (i < raw.cpu_s.size() && i < twin.cpu_s.size() && twin.cpu_s[i] > 0.0)
            r.paired_cpu.push_back(raw.cpu_s[i] / twin.cpu_s[i]);
          ++steady;
          evictions += rep.evictions;
          recomputed += rep.recomputed_launches;
          r.recompute_s.push_back(rep.recompute_s);
          r.stall_s.push_back(rep.stall_s);
        }
        if (steady > 0) {
          // Averaged over rounds as well: the same plan evicts the same buffers each time.
          const double n = static_cast<double>(r.rounds);
          r.evictions += (static_cast<double>(evictions) / static_cast<double>(steady) - r.evictions) / n;
          r.recomputed_launches +=
              (static_cast<double>(recomputed) / static_cast<double>(steady) - r.recomputed_launches) / n;
        }
        if (baseline_params.empty() || raw.params != baseline_params) r.params_bit_identical = false;
      }
    }
  }
  std::vector<run_result> out;
  double baseline_s = 0.0, baseline_cpu_s = 0.0;
  for (auto& st : states) {
    auto& r = st.result;
    // A plan that never reached a steady iteration (validation kept failing, or every
    // iteration diverged) has no time to show; its memory and correctness still count.
    if (r.status == "ok" && !r.policy.empty() && r.iteration_s.empty()) r.status = "unsteady";
    if (r.status == "ok" || r.status == "unsteady") {
      r.feature_map_bytes = r.peak_bytes > r.persistent_bytes ? r.peak_bytes - r.persistent_bytes : 0;
      r.iter_s = median(r.iteration_s);
      r.cpu_s = median(r.iteration_cpu_s);
      r.planning_s = median(st.planning);
      if (forward_launches > 0) r.extra_forwards = r.recomputed_launches / static_cast<double>(forward_launches);
      if (r.policy.empty() && baseline_s == 0.0) {
        baseline_s = r.iter_s;
        baseline_cpu_s = r.cpu_s;
      }
      if (r.rounds == 0) r.params_bit_identical = false;
    } else {
      r.params_bit_identical = false;
      r.within_budget = false;
    }
    out.push_back(r);
  }
  for (auto& r : out) {
    if (r.status != "ok") continue;
    // Paired with the twin's same iterations where there is one (Note [Paired timing]).
    if (!r.paired_wall.empty()) r.time_ratio = median(r.paired_wall);
    else if (baseline_s > 0.0) r.time_ratio = r.iter_s / baseline_s;
    if (!r.paired_cpu.empty()) r.cpu_ratio = median(r.paired_cpu);
    else if (baseline_cpu_s > 0.0) r.cpu_ratio = r.cpu_s / baseline_cpu_s;
  }
  return out;
}

}  // namespace sublinear::cli::bench
