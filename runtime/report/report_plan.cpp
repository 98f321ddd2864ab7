// Note [Plan preview] is in report_plan.hpp.
#include "common/text.hpp"
#include "runtime/report/report_plan.hpp"
#include "runtime/settings.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "runtime/report/report_json.hpp"
#include "runtime/report/report_text.hpp"
#include "policy/budget.hpp"
#include "policy/planner.hpp"
#include "policy/planning_overhead.hpp"
#include "policy/recompute_floor.hpp"
#include "policy/simulator.hpp"
#include "sublinear/error.hpp"
#include "tracer/analysis.hpp"
#include "tracer/trace_file.hpp"

namespace sublinear::runtime {


namespace {

std::string limit_text() {
  return "limit of " + std::to_string(tracer::max_allocated_bytes) + " bytes (64 PiB), the most a trace can allocate";
}

// Byte figures from the command line are bounded as a trace's are (tracer::max_allocated_bytes),
// so budget arithmetic on them cannot overflow.
void check_byte_figures(const plan_preview_options& o) {
  const auto check = [](const char* what, std::size_t bytes, const char* instead) {
    if (bytes > tracer::max_allocated_bytes) {
      throw config_error(std::string(what) + " of " + std::to_string(bytes) + " bytes is more than the " +
                         limit_text() + "; " + instead);
    }
  };
  check("the traced mapped peak (--mapped-peak)", o.traced_mapped_peak,
        "give the figure the runtime logged for the traced iteration (SUBLINEAR_LOG=info)");
  check("the device memory (--device-memory)", o.device_capacity, "give the device's memory (nvidia-smi shows it)");
  check("the host budget (--host-budget)", o.host_budget, "give the pinned host memory offloads may hold");
  if (o.offload == policy::offload_mode::only && !o.link.usable()) {
    throw config_error(
        "offload only needs a link: a trace records none, so give its bandwidth (--link-bandwidth GB/s), or "
        "plan with --offload auto or off");
  }
}

plan_preview_floor floor_of(const policy::iteration& g, std::size_t budget, const policy::recompute_floor_options& o) {
  const policy::recompute_floor f = policy::find_recompute_floor(g, budget, o);
  plan_preview_floor out;
  out.feasible = f.feasible;
  out.added_s = f.added_s;
  out.bound = f.at != policy::none;
  out.at = out.bound ? f.at : 0;
  if (out.bound && f.at < g.launches.size() && g.launches[f.at].kernel < g.kernel_names.size()) {
    out.at_kernel = g.kernel_names[g.launches[f.at].kernel];
  }
  out.must_free = f.must_free;
  out.can_free = f.can_free;
  out.planner_budget = budget;
  return out;
}

}  // namespace

plan_preview preview_plans(const tracer::trace& t, const plan_preview_options& options) {
  if (options.policies.empty()) throw config_error("plan: no policy given");
  for (const auto& p : options.policies) (void)policy::make_planner(p);  // names checked before any work
  check_byte_figures(options);

  const tracer::analysed_iteration an = tracer::analyse_last_iteration(t);
  const policy::iteration& g = an.graph;

  plan_preview out;
  out.device = t.device;
  out.estimated_times = t.planning;
  out.granularity = g.granularity;
  out.launches = g.launches.size();
  out.buffers = g.buffers.size();
  out.candidates = g.candidates.size();
  out.observed_launches = an.observed_launches;
  out.unproduced_count = an.unproduced.size();
  for (policy::buffer_id b : an.unproduced) {
    const policy::buffer& B = g.buffers[b];
    out.unproduced_bytes += B.size;
    const std::uint32_t k = g.launches[B.users.front()].kernel;
    out.unproduced.push_back({B.alloc_index, B.size,
                              k < g.kernel_names.size() ? g.kernel_names[k] : "launch " + std::to_string(B.users.front())});
  }
  std::stable_sort(out.unproduced.begin(), out.unproduced.end(),
                   [](const unproduced_buffer& a, const unproduced_buffer& b) { return a.bytes > b.bytes; });
  if (out.unproduced.size() > 16) out.unproduced.resize(16);
  out.graph_launches = an.graph_launches;
  for (std::size_t l = 0; l < an.launch_events.size(); ++l) {
    const tracer::event& e = t.events[an.launch_events[l]];
    if (e.kind != tracer::event_kind::launch) continue;
    std::vector<device::launch_attribute> attrs;
    for (const tracer::launch_attribute_record& r : t.attributes_of(e.seq)) attrs.push_back(r.attribute);
    const device::launch_attribute* bad = device::first_unreplayable(attrs);
    if (bad == nullptr) continue;
    if (++out.attribute_unreplayable_count > 16) continue;
    out.attribute_unreplayable.push_back({l, t.kernels[e.kernel].name, device::launch_attribute_name(bad->id),
                                          device::verdict_for(bad->id).why});
  }
  for (const auto& l : g.launches) out.iteration_compute_s += l.cost_s;
  out.live_peak = g.peak_bytes;
  out.unplanned_peak = policy::simulate(g, policy::plan{}).peak;
  out.traced_mapped_peak = options.traced_mapped_peak;
  const std::size_t reference_peak = options.traced_mapped_peak > 0 ? options.traced_mapped_peak : g.peak_bytes;
  out.budget_text = options.budget.text;
  if (options.budget.form == policy::budget_spec::kind::peak_fraction && reference_peak == 0) {
    throw config_error("the budget '" + options.budget.text +
                       "' is a multiple of the traced peak, but the trace's last iteration holds no live bytes (" +
                       (g.buffers.empty() ? std::string("it allocates nothing")
                                          : "its " + std::to_string(g.buffers.size()) + " buffers all have size 0") +
                       "); give the budget in bytes (--budget 8GiB) or the traced iteration's mapped peak "
                       "(--mapped-peak BYTES)");
  }
  out.budget = policy::resolve_budget(options.budget, options.device_capacity, reference_peak);
  if (out.budget > tracer::max_allocated_bytes) {
    throw config_error("the budget '" + options.budget.text + "' comes to " + std::to_string(out.budget) +
                       " bytes, more than the " + limit_text() + "; give a smaller budget");
  }
  // As the engine does (planning_overhead in policy/planning_overhead.hpp).
  const policy::traced_memory tm = policy::traced_memory_of(g, options.traced_mapped_peak);
  out.overhead = policy::planning_overhead(out.budget, tm);
  out.sub_page_peak = tm.sub_page_peak;
  out.planner_budget = out.budget > out.overhead ? out.budget - out.overhead : 0;
  out.floor = floor_of(g, out.planner_budget, {});
  out.offload = options.offload != policy::offload_mode::off && options.link.usable();
  out.offload_mode = out.offload ? options.offload : policy::offload_mode::off;
  out.link = options.link;
  out.host_budget = options.host_budget;
  out.fetch_margin = options.fetch_margin;
  policy::recompute_floor_options with_link;
  with_link.link = options.link;
  with_link.host_budget = options.host_budget;
  if (out.offload) out.offload_floor = floor_of(g, out.planner_budget, with_link);

  for (const auto& name : options.policies) {
    plan_preview_row row;
    row.planner = name;
    const auto started = std::chrono::steady_clock::now();
    if (out.offload_mode == policy::offload_mode::only && !policy::make_planner(name)->offloads()) {
      row.offload_unsupported = true;
      row.error = "does not offload (planners that do: " + policy::offloading_planner_list() + ")";
      out.rows.push_back(std::move(row));
      continue;
    }
    try {
      // As the engine's make_plan: the whole traced cache first, then, where that leaves
      // the planner too little, the cache scaled to the budget.
      std::optional<policy::plan> made;
      policy::planner::options po;
      po.packs = options.packs;
      po.offload_packs = options.packs && options.offload_packs;
      po.fetch_margin = options.fetch_margin;
      po.offload = out.offload_mode;
      po.link = options.link;
      po.host_budget = options.host_budget;
      po.threads = planning_threads(options.threads);
      row.planner_budget = out.planner_budget;
      try {
        made = policy::make_planner(name)->make_plan(g, out.planner_budget, po);
      } catch (const policy::infeasible_budget&) {
        const std::size_t scaled = policy::planning_overhead(out.budget, tm, policy::cache_allowance_mode::scaled);
        if (scaled >= out.overhead) throw;  // no cache traced: the same share
        row.cache_allowance = policy::to_string(policy::cache_allowance_mode::scaled);
        row.planner_budget = out.budget > scaled ? out.budget - scaled : 0;
        try {
          made = policy::make_planner(name)->make_plan(g, row.planner_budget, po);
        } catch (const policy::infeasible_budget& again) {
          row.error = again.what();
          row.smallest_feasible =
              policy::budget_for_planner_bytes(again.smallest_feasible(), tm, policy::cache_allowance_mode::scaled);
        }
      }
      if (made) {
        const policy::plan& p = *made;
        const policy::simulation sim = policy::simulate(g, p, options.link, options.host_budget);
        row.feasible = true;
        row.predicted_peak = p.predicted_peak;
        // The prediction adds what the allocator was seen to cost, not the safety allowance
        // (Note [Planning overhead]).
        row.predicted_mapped =
            p.predicted_peak + policy::cache_allowance(tm, out.budget, row.cache_allowance == "scaled"
                                                                           ? policy::cache_allowance_mode::scaled
                                                                           : policy::cache_allowance_mode::traced);
        row.added_compute_s = p.added_compute_s;
        row.recomputed_launches = p.recomputed_launches;
        row.evicted_buffers = sim.evicted_buffers;
        std::vector<policy::buffer_id> targets;
        for (const auto& e : p.evictions) targets.push_back(e.target);
        std::sort(targets.begin(), targets.end());
        targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
        for (auto b : targets) row.evicted_bytes += g.buffers[b].size;
        const auto kernel_of = [&](policy::launch_id l) -> std::string {
          if (l == policy::none || l >= g.launches.size()) return "";
          const std::uint32_t k = g.launches[l].kernel;
          return k < g.kernel_names.size() ? g.kernel_names[k] : "kernel " + std::to_string(k);
        };
        const auto index_of = [&](policy::buffer_id b) { return g.buffers[b].alloc_index; };
        for (const auto& e : p.evictions) {
          plan_preview_eviction pe;
          const policy::buffer& B = g.buffers[e.target];
          pe.alloc_index = B.alloc_index;
          pe.bytes = B.size;
          pe.producer = kernel_of(an.producer[e.target]);
          pe.evict_after = e.evict_after;
          pe.restore_before = e.restore_before;
          pe.restore_kernel = kernel_of(e.restore_before);
          for (policy::launch_id l : e.recipe) {
            pe.recipe.push_back(l);
            pe.recipe_kernels.push_back(kernel_of(l));
            pe.recipe_s += g.launches[l].cost_s;
          }
          for (policy::buffer_id b : e.temporaries) pe.temporaries.push_back(index_of(b));
          for (policy::buffer_id b : e.also_regenerates) pe.also_regenerates.push_back(index_of(b));
          row.evictions.push_back(std::move(pe));
        }
        row.offloaded_buffers = sim.offloaded_buffers;
        row.offloaded_bytes = sim.offloaded_bytes;
        row.host_bytes = sim.host_bytes;
        row.link_busy_s = sim.link_busy_s;
        row.predicted_stall_s = sim.predicted_stall_s;
        row.predicted_time_s = sim.predicted_time_s;
        for (std::size_t j = 0; j < p.offloads.size(); ++j) {
          const policy::offload& o = p.offloads[j];
          plan_preview_offload po_row;
          po_row.alloc_index = g.buffers[o.target].alloc_index;
          po_row.bytes = g.buffers[o.target].size;
          po_row.producer = kernel_of(an.producer[o.target]);
          po_row.evict_after = o.evict_after;
          po_row.release_before = o.release_before;
          po_row.fetch_after = o.fetch_after;
          po_row.restore_before = o.restore_before;
          po_row.restore_kernel = kernel_of(o.restore_before);
          row.offloads.push_back(std::move(po_row));
        }
      }
    } catch (const policy::infeasible_budget& e) {
      row.error = e.what();
      row.smallest_feasible = policy::budget_for_planner_bytes(e.smallest_feasible(), tm);
    } catch (const std::logic_error& e) {
      // A planner's bug: its row says so and the others still run, so one failure does not
      // cost the GPU suite's trace diagnosis every planner's figures.
      row = plan_preview_row{};
      row.planner = name;
      row.internal_error = true;
      row.error = e.what();
    }
    row.planning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const bool same_budget = row.planner_budget == out.planner_budget || row.planner_budget == 0;
    if (out.offload) {
      row.floor_s = same_budget ? out.offload_floor.added_s
                                : policy::find_recompute_floor(g, row.planner_budget, with_link).added_s;
    } else {
      row.floor_s = same_budget ? out.floor.added_s : policy::find_recompute_floor(g, row.planner_budget).added_s;
    }
    out.rows.push_back(std::move(row));
  }
  return out;
}

namespace {

// A kernel's name as a person reads it: demangled (CUDA kernels compiled from C++ keep
// their mangled names), without its return type and parameter list, and at most `width`
// characters.
std::string readable_kernel(const std::string& name, std::size_t width = 80) {
  std::string out = name;
  int status = -1;
  if (char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status); d != nullptr) {
    if (status == 0) out = d;
    std::free(d);
  }
  if (out != name) {
    // "void ns::kernel<...>(args)": drop the return type and the parameter list.
    if (out.rfind("void ", 0) == 0) out.erase(0, 5);
    int depth = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (out[i] == '<') ++depth;
      if (out[i] == '>') --depth;
      if (out[i] == '(' && depth == 0) {
        out.resize(i);
        break;
      }
    }
  }
  if (out.size() > width) out = out.substr(0, width - 3) + "...";
  return out;
}

std::string index_list(const std::vector<std::uint32_t>& v) {
  std::string out;
  for (auto i : v) out += (out.empty() ? "#" : ", #") + std::to_string(i);
  return out;
}

std::string percent_of(double part, double whole) {
  if (whole <= 0) return "";
  char pct[32];
  std::snprintf(pct, sizeof pct, " (+%.0f%%)", 100.0 * part / whole);
  return pct;
}

void render_floor(std::ostringstream& out, const plan_preview& p) {
  const plan_preview_floor& f = p.floor;
  if (!f.bound) {
    out << "recompute floor: none (no launch is over the budget)\n";
    return;
  }
  const std::string during = "during launch " + std::to_string(f.at) +
                             (f.at_kernel.empty() ? std::string() : " (" + readable_kernel(f.at_kernel, 60) + ")");
  if (!f.feasible) {
    out << "recompute floor: no plan can meet this budget: " << during << " " << format_bytes(f.must_free)
        << " must be out and at most " << format_bytes(f.can_free) << " can be\n";
    return;
  }
  out << "recompute floor: no plan adds less than " << text::seconds(f.added_s)
      << percent_of(f.added_s, p.iteration_compute_s) << "; " << during << " " << format_bytes(f.must_free)
      << " must be out (docs/policy.md, \"Recompute floor\")\n";
  if (p.offload) {
    const plan_preview_floor& o = p.offload_floor;
    out << "offload floor: "
        << (o.feasible ? "no plan that may also offload adds less than " + text::seconds(o.added_s) +
                             percent_of(o.added_s, p.iteration_compute_s) + " of time (recompute + stalls)"
                       : std::string("no plan can meet this budget even with offload"))
        << "\n";
  }
  // Rows planned with the cache scaled to the budget had more room, so a lower floor.
  for (const auto& r : p.rows) {
    if (r.cache_allowance != "scaled" || r.planner_budget == p.planner_budget || r.planner_budget == 0) continue;
    out << "  with the cache scaled to the budget (" << format_bytes(r.planner_budget) << " for live buffers, rows "
        << "marked *): " << (std::isinf(r.floor_s) ? std::string("no plan can meet it")
                                                     : "no plan adds less than " + text::seconds(r.floor_s) +
                                                           percent_of(r.floor_s, p.iteration_compute_s))
        << "\n";
    break;
  }
}

std::string gbps(double bytes_per_s) {
  char text[48];
  std::snprintf(text, sizeof text, "%.3g GB/s", bytes_per_s / 1e9);
  return text;
}

void render_offloads(std::ostringstream& out, const plan_preview_row& r) {
  if (r.offloads.empty()) return;
  out << "\n  " << r.planner << ": " << r.offloads.size() << " offload" << (r.offloads.size() == 1 ? "" : "s")
      << " (copied to host memory and back; " << format_bytes(r.offloaded_bytes) << " each way per iteration)\n";
  for (const auto& o : r.offloads) {
    out << "    #" << o.alloc_index << " " << format_bytes(o.bytes) << ", written by "
        << (o.producer.empty() ? std::string("?") : readable_kernel(o.producer)) << "\n"
        << "      copied out after launch " << o.evict_after << ", pages released before launch " << o.release_before
        << ", fetched after launch " << o.fetch_after << ", back before launch " << o.restore_before << " ("
        << readable_kernel(o.restore_kernel) << ")\n";
  }
}

void render_evictions(std::ostringstream& out, const plan_preview_row& r) {
  out << "\n  " << r.planner << ": " << r.evictions.size() << " eviction" << (r.evictions.size() == 1 ? "" : "s")
      << " (buffers by allocation index, launches by position in the traced iteration)\n";
  for (const auto& e : r.evictions) {
    out << "    #" << e.alloc_index << " " << format_bytes(e.bytes) << ", written by "
        << (e.producer.empty() ? std::string("?") : readable_kernel(e.producer)) << "\n"
        << "      out after launch " << e.evict_after << ", back before launch " << e.restore_before << " ("
        << readable_kernel(e.restore_kernel) << ")\n";
    if (e.recipe.empty()) {
      std::string carrier;
      for (const auto& other : r.evictions)
        for (std::uint32_t a : other.also_regenerates)
          if (a == e.alloc_index && !other.recipe.empty() && carrier.empty()) carrier = "#" + std::to_string(other.alloc_index);
      out << "      regenerated on the way by the recipe of " << (carrier.empty() ? std::string("another entry") : carrier)
          << "\n";
      continue;
    }
    out << "      replays " << e.recipe.size() << " launch" << (e.recipe.size() == 1 ? "" : "es") << " ("
        << text::seconds(e.recipe_s) << "):";
    for (std::size_t i = 0; i < e.recipe.size(); ++i) out << (i == 0 ? " " : ", ") << e.recipe[i];
    out << "\n";
    if (!e.temporaries.empty()) out << "      scratch for " << index_list(e.temporaries) << "\n";
    if (!e.also_regenerates.empty()) out << "      also regenerates " << index_list(e.also_regenerates) << "\n";
  }
}

}  // namespace

std::string render_plan_preview(const plan_preview& p, bool evictions) {
  std::ostringstream out;
  out << "traced iteration: " << p.launches << " launches, " << p.buffers << " buffers (" << p.candidates
      << " eviction candidates), " << text::seconds(p.iteration_compute_s) << " of compute, on the " << p.device
      << " device (pages of " << format_bytes(p.granularity) << ")\n";
  if (p.observed_launches > 0 || p.unproduced_count > 0) {
    out << "writes observed for " << p.observed_launches << " of " << p.launches << " launches";
    if (p.unproduced_count > 0) {
      out << "; " << p.unproduced_count << " buffer" << (p.unproduced_count == 1 ? " is" : "s are")
          << " read before any observed write (" << format_bytes(p.unproduced_bytes)
          << "), never evicted; the largest:";
      const std::size_t shown = std::min<std::size_t>(p.unproduced.size(), 4);
      for (std::size_t i = 0; i < shown; ++i) {
        const auto& u = p.unproduced[i];
        out << (i == 0 ? " " : ", ") << "#" << u.alloc_index << " (" << format_bytes(u.bytes) << ", read first by "
            << u.first_reader << ")";
      }
    }
    out << "\n";
  }
  if (p.graph_launches > 0) {
    out << p.graph_launches << " CUDA graph launch" << (p.graph_launches == 1 ? "" : "es")
        << ": every buffer live at one is never evicted (its nodes are not seen)\n";
  }
  if (p.attribute_unreplayable_count > 0) {
    out << p.attribute_unreplayable_count << " launch" << (p.attribute_unreplayable_count == 1 ? " is" : "es are")
        << " not replayable for a launch attribute (what they touch is never evicted):";
    const std::size_t shown = std::min<std::size_t>(p.attribute_unreplayable.size(), 4);
    for (std::size_t i = 0; i < shown; ++i) {
      const auto& a = p.attribute_unreplayable[i];
      out << (i == 0 ? " " : "; ") << "launch " << a.launch << " (" << a.kernel << "): " << a.attribute << " " << a.why;
    }
    out << "\n";
  }
  out << "peak without eviction: " << format_bytes(p.unplanned_peak) << " of live buffers";
  if (p.traced_mapped_peak > 0) {
    out << ", " << format_bytes(p.traced_mapped_peak) << " mapped (the allocator's cache adds "
        << format_bytes(p.overhead) << ")";
  }
  if (p.offload) {
    out << "\noffload: " << (p.offload_mode == policy::offload_mode::only ? "only (no recompute)" : "auto")
        << ", link " << gbps(p.link.to_host.bytes_per_s) << " to host, " << gbps(p.link.to_device.bytes_per_s)
        << " to the device";
    if (p.link.to_host.latency_s > 0.0 || p.link.to_device.latency_s > 0.0) {
      out << ", " << text::seconds(p.link.to_host.latency_s) << " and " << text::seconds(p.link.to_device.latency_s)
          << " per copy";
    }
    out << ", host budget "
        << (p.host_budget == 0 ? std::string("unbounded") : format_bytes(p.host_budget));
    out << ", fetch margin " << p.fetch_margin;
  }
  out << "\nbudget: " << format_bytes(p.budget) << " (" << p.budget_text << ")";
  if (p.overhead > 0) out << ", " << format_bytes(p.planner_budget) << " for live buffers";
  out << "\n";
  render_floor(out, p);
  if (p.traced_mapped_peak == 0) {
    out << "(predictions count live buffers only; pass --mapped-peak with the traced iteration's peak mapped bytes,\n"
           " as the runtime logs it, to include the allocator's cache)\n";
  }
  out << "\n";
  std::vector<std::vector<std::string>> rows;
  // With offload: three more columns after "evicted" (Note [Offload]).
  const auto row_of = [&](std::vector<std::string> cells, std::vector<std::string> link) {
    if (p.offload) cells.insert(cells.begin() + 3, link.begin(), link.end());
    return cells;
  };
  for (const auto& r : p.rows) {
    if (r.internal_error) {
      rows.push_back(row_of({r.planner, "failed", "internal error (below)", "", "", ""}, {"", "", ""}));
      continue;
    }
    if (r.offload_unsupported) {
      rows.push_back(row_of({r.planner, "n/a", "does not offload", "", "", ""}, {"", "", ""}));
      continue;
    }
    if (!r.feasible) {
      rows.push_back(row_of({r.planner + (r.cache_allowance == "scaled" ? " *" : ""), "infeasible",
                             "needs at least " + format_bytes_at_least(r.smallest_feasible), "", "", ""},
                            {"", "", ""}));
      continue;
    }
    const std::string added = text::seconds(r.added_compute_s) + percent_of(r.added_compute_s, p.iteration_compute_s);
    rows.push_back(row_of({r.planner + (r.cache_allowance == "scaled" ? " *" : ""),
                           format_bytes(p.traced_mapped_peak > 0 ? r.predicted_mapped : r.predicted_peak),
                           std::to_string(r.evicted_buffers) + " / " + format_bytes(r.evicted_bytes), added,
                           std::to_string(r.recomputed_launches), text::seconds(r.planning_s)},
                          {std::to_string(r.offloaded_buffers) + " / " + format_bytes(r.offloaded_bytes),
                           text::seconds(r.link_busy_s), text::seconds(r.predicted_stall_s) +
                                                              percent_of(r.predicted_stall_s, p.iteration_compute_s)}));
  }
  std::vector<bool> left_aligned(p.offload ? 9 : 6, false);
  left_aligned[0] = true;
  out << text::table(row_of({"policy", "predicted peak", "evicted", "added compute", "recomputed", "planning time"},
                            {"offloaded", "link busy", "stalls"}),
                     rows, left_aligned);
  out << "\n  predicted peak: " << (p.traced_mapped_peak > 0 ? "mapped bytes (live buffers + the allocator's cache)"
                                                              : "live buffers at page granularity")
      << "; evicted: buffers / bytes (recomputed); added compute: replayed launches' traced durations per "
         "iteration\n";
  if (p.offload) {
    out << "  offloaded: buffers / bytes over the link each way per iteration; link busy: copy time, both "
           "directions; stalls: predicted time launches wait for a copy\n";
  }
  for (const auto& r : p.rows) {
    if (r.cache_allowance == "scaled") {
      out << "  *: the whole traced cache leaves this planner too little, so it plans with the cache scaled to the "
             "budget,\n     as the runtime would (docs/runtime.md, \"Budget arithmetic\"): such a plan falls back "
             "if it runs out of room\n";
      break;
    }
  }
  for (const auto& r : p.rows) {
    if (r.internal_error) out << "\n  " << r.planner << " failed: " << r.error << "\n";
  }
  if (evictions) {
    for (const auto& r : p.rows) {
      if (!r.feasible) continue;
      if (!r.evictions.empty() || r.offloads.empty()) render_evictions(out, r);
      render_offloads(out, r);
    }
  }
  return out.str();
}

std::string plan_preview_json(const plan_preview& p) {
  std::string out;
  json::writer w(out);
  w.begin_object();
  w.member("device", p.device);
  w.member("estimated_times", p.estimated_times);
  w.member("granularity_bytes", p.granularity);
  w.member("launches", p.launches);
  w.member("buffers", p.buffers);
  w.member("candidates", p.candidates);
  w.member("observed_launches", p.observed_launches);
  w.member("unproduced_count", p.unproduced_count);
  w.member("unproduced_bytes", p.unproduced_bytes);
  w.key("unproduced");
  w.begin_array();
  for (const auto& u : p.unproduced) {
    w.begin_object(true);
    w.member("alloc_index", u.alloc_index);
    w.member("bytes", u.bytes);
    w.member("first_reader", u.first_reader);
    w.end_object();
  }
  w.end_array();
  w.member("graph_launches", p.graph_launches);
  w.member("attribute_unreplayable_count", p.attribute_unreplayable_count);
  w.key("attribute_unreplayable");
  w.begin_array();
  for (const auto& a : p.attribute_unreplayable) {
    w.begin_object(true);
    w.member("launch", a.launch);
    w.member("kernel", a.kernel);
    w.member("attribute", a.attribute);
    w.member("why", a.why);
    w.end_object();
  }
  w.end_array();
  w.member("iteration_compute_s", p.iteration_compute_s);
  w.member("live_peak_bytes", p.live_peak);
  w.member("unplanned_peak_bytes", p.unplanned_peak);
  w.member("traced_mapped_peak_bytes", p.traced_mapped_peak);
  w.member("overhead_bytes", p.overhead);
  w.member("sub_page_peak_bytes", p.sub_page_peak);
  w.member("budget", p.budget_text);
  w.member("budget_bytes", p.budget);
  w.member("planner_budget_bytes", p.planner_budget);
  w.key("recompute_floor");
  w.begin_object(true);
  w.member("feasible", p.floor.feasible);
  w.member("added_compute_s", p.floor.added_s);
  w.key("at_launch");
  if (p.floor.bound) {
    w.integer(p.floor.at);
  } else {
    w.null();
  }
  w.member("at_kernel", p.floor.at_kernel);
  w.member("must_free_bytes", p.floor.must_free);
  w.member("can_free_bytes", p.floor.can_free);
  w.end_object();
  w.key("offload");
  w.begin_object(true);
  w.member("mode", std::string(!p.offload ? "off" : p.offload_mode == policy::offload_mode::only ? "only" : "auto"));
  w.member("to_host_bytes_per_s", p.link.to_host.bytes_per_s);
  w.member("to_device_bytes_per_s", p.link.to_device.bytes_per_s);
  w.member("to_host_latency_s", p.link.to_host.latency_s);
  w.member("to_device_latency_s", p.link.to_device.latency_s);
  w.member("host_budget_bytes", p.host_budget);
  w.member("fetch_margin", p.fetch_margin);
  w.key("floor_s");
  if (p.offload) {
    w.number(p.offload_floor.added_s);
  } else {
    w.null();
  }
  w.end_object();
  const auto integers = [&w](std::string_view key, const auto& values) {
    w.key(key);
    w.begin_array(true);
    for (auto v : values) w.integer(v);
    w.end_array();
  };
  w.key("planners");
  w.begin_array();
  for (const auto& r : p.rows) {
    w.begin_object(true);
    w.member("planner", r.planner);
    w.member("feasible", r.feasible);
    w.member("error", r.error);
    w.member("internal_error", r.internal_error);
    w.member("smallest_feasible_bytes", r.smallest_feasible);
    w.member("cache_allowance", r.cache_allowance);
    w.member("planner_budget_bytes", r.planner_budget);
    w.member("predicted_peak_bytes", r.predicted_peak);
    w.member("predicted_mapped_bytes", r.predicted_mapped);
    w.member("added_compute_s", r.added_compute_s);
    w.member("floor_s", r.floor_s);
    w.member("recomputed_launches", r.recomputed_launches);
    w.member("evicted_buffers", r.evicted_buffers);
    w.member("evicted_bytes", r.evicted_bytes);
    w.member("offload_unsupported", r.offload_unsupported);
    w.member("offloaded_buffers", r.offloaded_buffers);
    w.member("offloaded_bytes", r.offloaded_bytes);
    w.member("host_bytes", r.host_bytes);
    w.member("link_busy_s", r.link_busy_s);
    w.member("predicted_stall_s", r.predicted_stall_s);
    w.member("predicted_time_s", r.predicted_time_s);
    w.key("offloads");
    w.begin_array();
    for (const auto& o : r.offloads) {
      w.begin_object(true);
      w.member("alloc_index", o.alloc_index);
      w.member("bytes", o.bytes);
      w.member("producer", o.producer);
      w.member("evict_after", o.evict_after);
      w.member("release_before", o.release_before);
      w.member("fetch_after", o.fetch_after);
      w.member("restore_before", o.restore_before);
      w.member("restore_kernel", o.restore_kernel);
      w.end_object();
    }
    w.end_array();
    w.member("planning_s", r.planning_s);
    w.key("evictions");
    w.begin_array();
    for (const auto& e : r.evictions) {
      w.begin_object(true);
      w.member("alloc_index", e.alloc_index);
      w.member("bytes", e.bytes);
      w.member("producer", e.producer);
      w.member("evict_after", e.evict_after);
      w.member("restore_before", e.restore_before);
      w.member("restore_kernel", e.restore_kernel);
      integers("recipe", e.recipe);
      w.key("recipe_kernels");
      w.begin_array();
      for (const auto& k : e.recipe_kernels) w.string(k);
      w.end_array();
      w.member("recipe_s", e.recipe_s);
      integers("temporaries", e.temporaries);
      integers("also_regenerates", e.also_regenerates);
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return out;
}

}  // namespace sublinear::runtime
