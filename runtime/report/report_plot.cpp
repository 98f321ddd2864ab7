// The memory-timeline plot of a report, as SVG (common/svg.hpp, Note [SVG writer]).
//
// Note [Memory plot]
// Rationale: the one picture that explains sublinear: the same training iteration with
//   and without a budget. Live memory is the forward pass's mountain (activations pile up
//   until the loss, backward frees them); under a budget the mountain is flattened. A
//   caching allocator's mapped memory climbs to its peak and stays there, so it is drawn
//   beside live memory, thinner, with the budget it is held under. It must read without
//   knowing the project: a title, axes with units, a legend naming each curve with its peak.
// Approach: x is the launch number within the iteration (kernels, copies and sets in issue
//   order), not time: the two iterations run the same launches, so their curves line up
//   launch for launch while their times differ. y is bytes, in the binary unit that suits
//   the largest value. Live = allocated minus evicted (live blocks that hold pages); each
//   curve is a step line. Baseline: the last traced iteration (unbudgeted); budgeted: the
//   last planned iteration that did not diverge. Below the axis, two rows of ticks mark
//   the budgeted iteration's evictions and regenerations. Curves with more samples than
//   twice the plot's width are reduced to min, max and last per pixel column, so peaks
//   survive. Okabe-Ito colours; the budgeted curves are also thicker, so the two differ
//   without colour, and mapped is dashed.
// Limitations: one iteration of each kind is drawn; a report without memory samples (the
//   timeline was not recorded) gets a plot that says so.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "common/svg.hpp"
#include "common/text.hpp"
#include "runtime/report/report.hpp"

namespace sublinear::runtime {

namespace {

constexpr const char* kBaselineColour = "#0072B2";  // blue
constexpr const char* kBudgetedColour = "#D55E00";  // vermillion
constexpr const char* kBudgetColour = "#222222";
constexpr const char* kEvictColour = "#D55E00";       // vermillion, as the budgeted curve
constexpr const char* kRegenerateColour = "#009E73";  // bluish green
constexpr const char* kOffloadColour = "#56B4E9";     // sky blue: copies over the link

std::string fmt(double v, int decimals = 1) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

struct point {
  double x = 0;  // launch number
  double y = 0;  // bytes
};

// One iteration's samples: live and mapped bytes after each launch, and where its
// evictions and regenerations happened.
struct curve {
  std::size_t iteration = 0;
  std::vector<point> live, mapped;
  std::vector<double> evictions, regenerations;  // launch numbers
  std::vector<double> offloads, fetches;         // launch numbers of planned copies out and back
  std::size_t offloaded_bytes = 0;
  std::size_t live_peak = 0, mapped_peak = 0;
  std::size_t launches = 0;
};

std::optional<curve> samples_of(const run_report& r, std::size_t iteration) {
  curve c;
  c.iteration = iteration;
  for (const auto& re : r.timeline) {
    if (re.iteration != iteration) continue;
    const auto x = static_cast<double>(re.launch);
    switch (re.event.what) {
      case timeline_event::kind::memory: {
        const std::size_t live = re.event.allocated - std::min(re.event.evicted, re.event.allocated);
        c.live.push_back({x, static_cast<double>(live)});
        c.mapped.push_back({x, static_cast<double>(re.event.mapped)});
        c.live_peak = std::max(c.live_peak, live);
        c.mapped_peak = std::max(c.mapped_peak, re.event.mapped);
        c.launches = std::max(c.launches, re.launch);
        break;
      }
      case timeline_event::kind::evict: c.evictions.push_back(x); break;
      case timeline_event::kind::regenerate: c.regenerations.push_back(x); break;
      case timeline_event::kind::offload:
        c.offloads.push_back(x);
        c.offloaded_bytes += re.event.bytes;
        break;
      case timeline_event::kind::fetch: c.fetches.push_back(x); break;
      default: break;
    }
  }
  if (c.live.empty()) return std::nullopt;
  // The iteration's own peak (between samples, inside a launch) can exceed every sample.
  for (const auto& it : r.iterations)
    if (it.index == iteration) c.mapped_peak = std::max(c.mapped_peak, it.peak_mapped);
  return c;
}

// The last iteration satisfying `pick` that has memory samples.
template <class Pred>
std::optional<curve> last_curve(const run_report& r, Pred pick) {
  for (auto it = r.iterations.rbegin(); it != r.iterations.rend(); ++it) {
    if (!pick(*it)) continue;
    if (auto c = samples_of(r, it->index)) return c;
  }
  return std::nullopt;
}

// 1, 2, 2.5 or 5 x 10^k, so that about `target` steps span `range`.
double nice_step(double range, int target) {
  if (range <= 0) return 1.0;
  const double raw = range / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * magnitude >= raw) return m * magnitude;
  return 10.0 * magnitude;
}

struct unit {
  const char* name;
  double bytes;
};

unit unit_for(double max_bytes) {
  if (max_bytes >= 1024.0 * 1024.0 * 1024.0) return {"GiB", 1024.0 * 1024.0 * 1024.0};
  if (max_bytes >= 1024.0 * 1024.0) return {"MiB", 1024.0 * 1024.0};
  if (max_bytes >= 1024.0) return {"KiB", 1024.0};
  return {"B", 1.0};
}

}  // namespace

std::string render_memory_plot(const run_report& r, const plot_options& options) {
  const double W = options.width, H = options.height;
  const double left = 96, right = 32, top = 78, bottom = 270;
  const svg_box plot{left, top, W - left - right, H - top - bottom};

  auto baseline = last_curve(r, [](const iteration_report& it) { return it.state == engine_state::trace; });
  auto budgeted = last_curve(r, [](const iteration_report& it) {
    return (it.state == engine_state::steady || it.state == engine_state::validate) && it.budget > 0 && !it.diverged;
  });
  std::size_t budget = r.plan.budget;
  if (budgeted)
    for (const auto& it : r.iterations)
      if (it.index == budgeted->iteration) budget = it.budget;

  double x_max = 1, y_max = static_cast<double>(budget);
  for (const auto* c : {baseline ? &*baseline : nullptr, budgeted ? &*budgeted : nullptr}) {
    if (c == nullptr) continue;
    x_max = std::max(x_max, static_cast<double>(c->launches));
    y_max = std::max({y_max, static_cast<double>(c->mapped_peak), static_cast<double>(c->live_peak)});
  }
  if (y_max <= 0) y_max = 1;
  const unit u = unit_for(y_max);
  const double y_step = nice_step(y_max / u.bytes * 1.05, 6) * u.bytes;
  const double y_top = std::ceil(y_max * 1.05 / y_step) * y_step;
  const double x_step = std::max(1.0, nice_step(x_max, 8));
  const double x_right = x_max;  // the axis ends with the iteration's last launch

  const svg_scale X{0, x_right, plot.left, plot.right()};
  const svg_scale Y{0, y_top, plot.bottom(), plot.top};

  svg_document doc(W, H, {{"version", "1.1"}, {"font-family", "DejaVu Sans, Helvetica, Arial, sans-serif"}});

  // Title and subtitle.
  std::string title = options.title;
  if (title.empty()) {
    title = "Device memory during one training iteration";
    if (!r.model.empty()) title += ": " + r.model;
  }
  std::string subtitle;
  if (baseline && budgeted) {
    const double saved =
        100.0 * (1.0 - static_cast<double>(budgeted->mapped_peak) / static_cast<double>(baseline->mapped_peak));
    subtitle = "sublinear (policy " + r.plan.planner + ") holds mapped memory under " + format_bytes(budget) +
               ": peak " + format_bytes(baseline->mapped_peak) + " \u2192 " + format_bytes(budgeted->mapped_peak) +
               " (" + fmt(saved, 0) + "% less)";
  } else if (baseline) {
    subtitle = "No budgeted iteration in this report" +
               (r.plan.error.empty() ? std::string() : std::string(": ") + r.plan.error);
  } else {
    subtitle = "policy " + r.plan.planner;
  }
  doc.text(left, 32, title, {{"font-size", 20}, {"font-weight", "bold"}, {"fill", "#111"}});
  doc.text(left, 56, subtitle, {{"font-size", 14}, {"fill", "#444"}});

  // Below the plot, top to bottom: eviction and regeneration ticks, x tick labels, x label.
  const double evict_row = plot.bottom() + 14, regenerate_row = plot.bottom() + 30;
  const double x_labels = plot.bottom() + 54, x_title = plot.bottom() + 78;

  // Grid, ticks and tick labels.
  doc.begin_group({{"id", "axes"}, {"font-size", 12}, {"fill", "#333"}});
  for (double v = 0; v <= y_top + y_step / 2; v += y_step) {
    const double shown = v / u.bytes;
    doc.y_gridline(plot, Y(v), fmt(shown, shown == std::floor(shown) ? 0 : 1), "#e3e3e3", 8);
  }
  for (double v = 0; v <= x_right + 1e-9; v += x_step)
    doc.x_gridline(plot, X(v), fmt(v, 0), "#f0f0f0", x_labels - plot.bottom());
  doc.line(plot.left, plot.bottom(), plot.right(), plot.bottom(), {{"stroke", "#333"}, {"stroke-width", 1.5}});
  doc.line(plot.left, plot.top, plot.left, plot.bottom(), {{"stroke", "#333"}, {"stroke-width", 1.5}});
  doc.text(left + plot.width / 2, x_title, "launches into the iteration (kernels, copies and sets, in issue order)",
           {{"text-anchor", "middle"}, {"font-size", 14}});
  doc.vertical_text(28, top + plot.height / 2, "device memory (" + std::string(u.name) + ")",
                    {{"text-anchor", "middle"}, {"font-size", 14}});
  doc.end_group();

  auto path_of = [&](const std::vector<point>& points) {
    // Reduce to min/max/last per pixel column when there are more samples than pixels.
    std::vector<point> pts;
    if (points.size() > static_cast<std::size_t>(2 * plot.width)) {
      long column = -1;
      double lo = 0, hi = 0;
      point last{};
      auto flush = [&] {
        if (column < 0) return;
        pts.push_back({last.x, hi});
        pts.push_back({last.x, lo});
        pts.push_back(last);
      };
      for (const point& p : points) {
        const long col = static_cast<long>(X(p.x));
        if (col != column) {
          flush();
          column = col;
          lo = hi = p.y;
        }
        lo = std::min(lo, p.y);
        hi = std::max(hi, p.y);
        last = p;
      }
      flush();
    } else {
      pts = points;
    }
    svg_path d;
    d.move_to(X(pts.front().x), Y(pts.front().y));
    for (std::size_t i = 1; i < pts.size(); ++i) d.horizontal_to(X(pts[i].x)).vertical_to(Y(pts[i].y));
    return d;
  };
  auto draw = [&](const char* id, const std::vector<point>& points, const char* colour, double width,
                  const char* dash) {
    doc.path(path_of(points), {{"id", id},
                               {"fill", "none"},
                               {"stroke", colour},
                               {"stroke-width", width},
                               {"stroke-dasharray", dash},
                               {"stroke-linejoin", "round"}});
  };
  // One short vertical tick per event; events in the same pixel column share one tick.
  auto ticks = [&](const char* id, const std::vector<double>& at, double row, const char* colour) {
    svg_path d;
    long column = -1;
    for (double x : at) {
      const long col = static_cast<long>(X(x));
      if (col == column) continue;
      column = col;
      d.move_to(X(x), row - 6).vertical_to(row + 6);
    }
    doc.path(d, {{"id", id}, {"stroke", colour}, {"stroke-width", 1.5}});
  };

  // Curves, mapped (dashed) under live (solid), and the budget line.
  if (budget > 0) {
    const double y = Y(static_cast<double>(budget));
    doc.line(plot.left, y, plot.right(), y,
             {{"id", "budget"}, {"stroke", kBudgetColour}, {"stroke-width", 1.5}, {"stroke-dasharray", "8 5"}});
    doc.text(plot.right() - 6, y - 7, "budget " + format_bytes(budget),
             {{"text-anchor", "end"}, {"font-size", 13}, {"fill", kBudgetColour}});
  }
  if (baseline) {
    draw("baseline-mapped", baseline->mapped, kBaselineColour, 1.25, "3 3");
    draw("baseline", baseline->live, kBaselineColour, 1.75, "");
  }
  if (budgeted) {
    draw("budgeted-mapped", budgeted->mapped, kBudgetedColour, 1.5, "3 3");
    draw("budgeted", budgeted->live, kBudgetedColour, 2.5, "");
    doc.text(plot.left - 8, evict_row + 4, "evict", {{"text-anchor", "end"}, {"font-size", 11}, {"fill", "#444"}});
    doc.text(plot.left - 8, regenerate_row + 4, "regen.",
             {{"text-anchor", "end"}, {"font-size", 11}, {"fill", "#444"}});
    if (!budgeted->evictions.empty()) ticks("evictions", budgeted->evictions, evict_row, kEvictColour);
    if (!budgeted->regenerations.empty())
      ticks("regenerations", budgeted->regenerations, regenerate_row, kRegenerateColour);
    // Offloads share the rows: copies out with the evictions, copies back with the
    // regenerations, in the link's colour.
    if (!budgeted->offloads.empty()) ticks("offloads", budgeted->offloads, evict_row, kOffloadColour);
    if (!budgeted->fetches.empty()) ticks("fetches", budgeted->fetches, regenerate_row, kOffloadColour);
  }
  if (!baseline && !budgeted) {
    doc.text(left + plot.width / 2, top + plot.height / 2,
             "No memory samples in this report (the run did not record a timeline)",
             {{"text-anchor", "middle"}, {"font-size", 16}, {"fill", "#666"}});
  }

  // Legend, below the x-axis label: one entry per line.
  doc.begin_group({{"id", "legend"}, {"font-size", 13}, {"fill", "#222"}});
  double ly = x_title + 28;
  auto entry = [&](const char* colour, double width, const char* dash, const std::string& text) {
    doc.line(left, ly - 4, left + 34, ly - 4, {{"stroke", colour}, {"stroke-width", width}, {"stroke-dasharray", dash}});
    doc.text(left + 44, ly, text);
    ly += 19;
  };
  if (baseline) {
    const std::string which = "without a budget (iteration " + std::to_string(baseline->iteration) + ", traced)";
    entry(kBaselineColour, 1.75, "", which + ": live memory, peak " + format_bytes(baseline->live_peak));
    entry(kBaselineColour, 1.25, "3 3", which + ": mapped memory, peak " + format_bytes(baseline->mapped_peak));
  }
  if (budgeted) {
    const std::string which =
        "with sublinear (iteration " + std::to_string(budgeted->iteration) + ", policy " + r.plan.planner + ")";
    entry(kBudgetedColour, 2.5, "", which + ": live memory, peak " + format_bytes(budgeted->live_peak));
    entry(kBudgetedColour, 1.5, "3 3", which + ": mapped memory, peak " + format_bytes(budgeted->mapped_peak));
  }
  if (budget > 0) entry(kBudgetColour, 1.5, "8 5", "budget on mapped memory: " + format_bytes(budget));
  if (budgeted) {
    entry(kEvictColour, 1.5, "", std::to_string(budgeted->evictions.size()) + " evictions (ticks under the axis)");
    entry(kRegenerateColour, 1.5, "",
          std::to_string(budgeted->regenerations.size()) + " regenerations (ticks under the axis)");
    if (!budgeted->offloads.empty())
      entry(kOffloadColour, 1.5, "",
            std::to_string(budgeted->offloads.size()) + " buffers offloaded to host memory (" +
                format_bytes(budgeted->offloaded_bytes) + "), fetched back before their use (ticks under the axis)");
  }
  doc.end_group();
  // What the two quantities mean, for a reader who does not know the allocator.
  doc.text(left, ly + 4,
           "live = bytes of tensors that hold pages; mapped = physical pages the allocator holds (live tensors plus "
           "its cache)",
           {{"font-size", 11}, {"fill", "#666"}});
  return doc.finish();
}

}  // namespace sublinear::runtime
