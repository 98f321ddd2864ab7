// The Chrome-trace / Perfetto timeline of a report.
//
// Note [Chrome trace tracks]
// Rationale: a timeline answers "when was memory given back, when was it regenerated, and
//   who waited" at a glance, and chrome://tracing and ui.perfetto.dev read the same JSON
//   event format, so one file serves both.
// Approach: one process ("sublinear: MODEL") with counter tracks "mapped", "allocated" and
//   "budget" (bytes; separate counters, because a counter with several series is drawn
//   stacked and mapped + allocated would read as a sum), and four named thread tracks of
//   complete ("X") slices: iterations (one slice per iteration, named with its state),
//   evictions (one slice per eviction request, named with the producer kernel), replay
//   (one slice per regeneration: the time spent queuing its recipe) and stalls (the time
//   the launch that needed the buffer was held at entry). Timestamps are microseconds
//   since the engine started.
// Limitations: the engine regenerates synchronously at the entering launch, so a stall
//   slice covers the same interval as its replay slice; they are separate tracks so that a
//   prefetching engine (replay ahead of use, no stall) shows the difference. On a GPU the
//   replay slice is host time spent queuing, not device time.
#include <algorithm>
#include <string>

#include "runtime/report/report.hpp"
#include "runtime/report/report_json.hpp"

namespace sublinear::runtime {

namespace {

enum track : int { iterations_track = 1, evictions_track = 2, replay_track = 3, stalls_track = 4, copy_track = 5 };

constexpr double kMinSliceUs = 1.0;  // a zero-length slice is invisible in both viewers

double us(double s) { return std::max(0.0, s) * 1e6; }

}  // namespace

std::string render_chrome_trace(const run_report& r) {
  std::string out;
  json::writer w(out);
  w.begin_object();
  w.member("displayTimeUnit", "ms");
  w.key("otherData");
  w.begin_object(true);
  w.member("generator", r.generator);
  w.member("model", r.model);
  w.member("planner", r.plan.planner);
  w.member("budget_bytes", r.plan.budget);
  w.end_object();
  w.key("traceEvents");
  w.begin_array();

  auto metadata = [&](const char* name, int tid, const std::string& value, int sort) {
    w.begin_object(true);
    w.member("ph", "M");
    w.member("name", name);
    w.member("pid", 1);
    w.member("tid", tid);
    w.key("args");
    w.begin_object(true);
    if (sort >= 0) {
      w.member("sort_index", sort);
    } else {
      w.member("name", value);
    }
    w.end_object();
    w.end_object();
  };
  metadata("process_name", 0, "sublinear: " + (r.model.empty() ? std::string("run") : r.model), -1);
  const std::pair<int, const char*> tracks[] = {
      {iterations_track, "iterations"}, {evictions_track, "evictions"}, {replay_track, "replay"}, {stalls_track, "stalls"},
      {copy_track, "copy stream"}};
  for (const auto& [tid, name] : tracks) {
    metadata("thread_name", tid, name, -1);
    metadata("thread_sort_index", tid, "", tid);
  }

  auto counter = [&](const char* name, double ts, std::size_t bytes) {
    w.begin_object(true);
    w.member("ph", "C");
    w.member("name", name);
    w.member("pid", 1);
    w.member("ts", ts);
    w.key("args");
    w.begin_object(true);
    w.member("bytes", bytes);
    w.end_object();
    w.end_object();
  };
  auto slice = [&](int tid, const std::string& name, const char* category, double begin_s, double end_s,
                   const std::vector<std::pair<const char*, std::string>>& text_args,
                   const std::vector<std::pair<const char*, std::size_t>>& size_args) {
    w.begin_object(true);
    w.member("ph", "X");
    w.member("name", name);
    w.member("cat", category);
    w.member("pid", 1);
    w.member("tid", tid);
    w.member("ts", us(begin_s));
    w.member("dur", std::max(kMinSliceUs, us(end_s) - us(begin_s)));
    w.key("args");
    w.begin_object(true);
    for (const auto& [k, v] : text_args) w.member(k, v);
    for (const auto& [k, v] : size_args) w.member(k, v);
    w.end_object();
    w.end_object();
  };

  std::size_t budget = 0;
  bool budget_written = false;
  double last_regenerate_begin = -1.0;
  for (std::size_t i = 0; i < r.timeline.size(); ++i) {
    const report_event& re = r.timeline[i];
    const timeline_event& e = re.event;
    switch (e.what) {
      case timeline_event::kind::memory:
        counter("mapped", us(e.begin_s), e.mapped);
        counter("allocated", us(e.begin_s), e.allocated);
        break;
      case timeline_event::kind::evict:
        slice(evictions_track, "evict " + (e.label.empty() ? std::string("buffer") : e.label), "eviction", e.begin_s,
              e.end_s, {{"producer", e.label}}, {{"bytes", e.bytes}, {"iteration", re.iteration}});
        break;
      case timeline_event::kind::regenerate: {
        // A recipe that maps several buffers back writes one event per buffer, all with
        // the recipe's span: one replay slice and one stall for the lot.
        if (e.begin_s == last_regenerate_begin) break;
        last_regenerate_begin = e.begin_s;
        std::size_t bytes = 0;
        for (std::size_t j = i; j < r.timeline.size() && r.timeline[j].event.what == timeline_event::kind::regenerate &&
                                r.timeline[j].event.begin_s == e.begin_s;
             ++j)
          bytes += r.timeline[j].event.bytes;
        slice(replay_track, "regenerate " + (e.label.empty() ? std::string("buffer") : e.label), "replay", e.begin_s,
              e.end_s, {{"producer", e.label}}, {{"bytes", bytes}, {"iteration", re.iteration}});
        slice(stalls_track, "stall", "stall", e.begin_s, e.end_s, {{"waiting_for", e.label}},
              {{"bytes", bytes}, {"iteration", re.iteration}});
        break;
      }
      case timeline_event::kind::iteration: {
        std::size_t it_budget = 0;
        for (const auto& it : r.iterations)
          if (it.index == re.iteration) it_budget = it.budget;
        slice(iterations_track, "iteration " + std::to_string(re.iteration) + " [" + e.label + "]", "iteration",
              e.begin_s, e.end_s, {{"state", e.label}}, {{"peak_mapped_bytes", e.bytes}, {"budget_bytes", it_budget}});
        // The budget in force from this iteration's end on (the plan is made there).
        std::size_t next_budget = it_budget;
        for (const auto& it : r.iterations)
          if (it.index == re.iteration + 1) next_budget = it.budget;
        if (!budget_written || next_budget != budget) {
          if (!budget_written) counter("budget", 0.0, it_budget);
          counter("budget", us(e.end_s), next_budget);
          budget = next_budget;
          budget_written = true;
        }
        break;
      }
      case timeline_event::kind::offload:
      case timeline_event::kind::fetch:
        // Queued .. seen complete by the engine (the copy ran somewhere in between).
        slice(copy_track,
              (e.what == timeline_event::kind::offload ? "to host " : "to device ") +
                  (e.label.empty() ? std::string("buffer") : e.label),
              "copy", e.begin_s, e.end_s, {{"producer", e.label}}, {{"bytes", e.bytes}, {"iteration", re.iteration}});
        break;
      case timeline_event::kind::allocate:
      case timeline_event::kind::release:
        break;  // per-block events are for the PyTorch snapshot; the counters show their sum
    }
  }
  w.end_array();
  w.end_object();
  return out;
}

}  // namespace sublinear::runtime
