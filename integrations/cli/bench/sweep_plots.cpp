// The sweeps' SVG plots (Note [Plots]).
#include "integrations/cli/bench/sweep_plots.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/atomic_file.hpp"
#include "common/svg.hpp"
#include "integrations/cli/bench/measure.hpp"
#include "sublinear/error.hpp"

namespace sublinear::cli::bench {

namespace {

// Note [Plots]
// Plain SVG through the project's writer (Note [SVG writer]), small enough to read in a
// diff: a title, axes with units, ticks, a legend. Log axes where the claim is an
// exponent (memory against depth or length).
struct svg_series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;
  bool dashed = false;
  bool markers_only = false;
  bool markers = true;  // false: a reference line (a target), no points
};

struct svg_chart {
  std::string title;
  std::string subtitle;
  std::string x_label, y_label;
  bool log_x = false, log_y = false;
  std::vector<svg_series> series;
  std::vector<double> x_ticks;  // empty: chosen from the data
  double y_floor = std::numeric_limits<double>::quiet_NaN();
};

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

std::string tick_text(double v) {
  if (v >= 100 || v == std::floor(v)) return fmt("%.0f", v);
  if (v >= 10) return fmt("%.0f", v);
  if (v >= 1) return fmt("%.1f", v);
  return fmt("%.2f", v);
}

// Ticks for [lo, hi]: powers of two on a log axis, 1-2-5 steps on a linear one.
std::vector<double> nice_ticks(double lo, double hi, bool log_axis) {
  std::vector<double> t;
  if (log_axis) {
    for (double v = std::pow(2.0, std::floor(std::log2(lo))); v <= hi * 1.0001; v *= 2.0)
      if (v >= lo * 0.9999) t.push_back(v);
    while (t.size() > 8) {
      std::vector<double> every_other;
      for (std::size_t i = 0; i < t.size(); i += 2) every_other.push_back(t[i]);
      t = every_other;
    }
    return t;
  }
  const double span = hi - lo;
  const double raw = span / 5.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 1.5 ? mag : raw / mag < 3.5 ? 2 * mag : raw / mag < 7.5 ? 5 * mag : 10 * mag;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * span; v += step) t.push_back(v);
  return t;
}

// The margin right of the plot that holds the legend: `min_margin`, or wider where a name
// would run past the image's edge. A name starts `text_offset` right of the plot; SVG has
// no text metrics, so its width is estimated at 6.5 px a character (12 px Helvetica
// averages about 6: the estimate errs wide), with 12 px to spare.
double legend_margin(const std::vector<svg_series>& series, double min_margin, double text_offset) {
  std::size_t longest = 0;
  for (const auto& s : series) longest = std::max(longest, s.name.size());
  return std::max(min_margin, text_offset + 6.5 * static_cast<double>(longest) + 12.0);
}

// The root, the background and the titles every chart starts with.
svg_document start_chart(double w, double h, const std::string& title, const std::string& subtitle) {
  svg_document doc(w, h, {{"font-family", "Helvetica, Arial, sans-serif"}, {"font-size", 12}});
  doc.text(w / 2, 22, title, {{"text-anchor", "middle"}, {"font-size", 15}, {"font-weight", "bold"}});
  if (!subtitle.empty()) doc.text(w / 2, 40, subtitle, {{"text-anchor", "middle"}, {"fill", "#555"}});
  return doc;
}

std::string render_chart(const svg_chart& c) {
  // The plot keeps its size; the image widens where the legend needs it.
  const double h = 420, left = 72, top = 58, bottom = 56, plot_w = 438;
  const double right = legend_margin(c.series, 250, 42), w = left + plot_w + right;
  const svg_box plot{left, top, plot_w, h - top - bottom};
  double x0 = std::numeric_limits<double>::max(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : c.series) {
    for (auto [x, y] : s.points) {
      if ((c.log_x && x <= 0) || (c.log_y && y <= 0) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  for (double x : c.x_ticks) {
    x0 = std::min(x0, x);
    x1 = std::max(x1, x);
  }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (std::isfinite(c.y_floor)) y0 = std::min(y0, c.y_floor);
  if (c.log_y) {
    y0 /= 1.3;
    y1 *= 1.3;
  } else {
    const double pad = (y1 - y0) * 0.08 + 1e-9;
    y0 -= pad;
    y1 += pad;
  }
  if (c.log_x) {
    x0 /= 1.15;
    x1 *= 1.15;
  } else {
    const double pad = (x1 - x0) * 0.06 + 1e-9;
    x0 -= pad;
    x1 += pad;
  }
  const svg_scale tx{x0, x1, plot.left, plot.right(), c.log_x};
  const svg_scale ty{y0, y1, plot.bottom(), plot.top, c.log_y};
  svg_document doc = start_chart(w, h, c.title, c.subtitle);
  // Grid and ticks.
  for (double v : c.x_ticks.empty() ? nice_ticks(x0, x1, c.log_x) : c.x_ticks)
    doc.x_gridline(plot, tx(v), tick_text(v), "#e5e5e5", 16);
  for (double v : nice_ticks(y0, y1, c.log_y)) doc.y_gridline(plot, ty(v), tick_text(v), "#e5e5e5", 6);
  doc.rect(plot.left, plot.top, plot.width, plot.height, {{"fill", "none"}, {"stroke", "#333"}});
  doc.text(plot.left + plot.width / 2, h - 14, c.x_label, {{"text-anchor", "middle"}});
  doc.vertical_text(18, plot.top + plot.height / 2, c.y_label, {{"text-anchor", "middle"}});
  // Series and legend.
  double ly = top + 8;
  for (std::size_t i = 0; i < c.series.size(); ++i) {
    const auto& s = c.series[i];
    const std::string color = s.color.empty() ? kColors[i % std::size(kColors)] : s.color;
    const char* dash = s.dashed ? "6,4" : "";
    svg_path path;
    for (auto [x, y] : s.points) {
      if ((c.log_x && x <= 0) || (c.log_y && y <= 0) || !std::isfinite(y)) continue;
      path.line_to(tx(x), ty(y));
      if (s.markers) doc.circle(tx(x), ty(y), s.markers_only ? 5 : 3.5, {{"fill", color}});
    }
    if (!s.markers_only && !path.empty()) {
      doc.path(path, {{"fill", "none"}, {"stroke", color}, {"stroke-width", 2}, {"stroke-dasharray", dash}});
    }
    const double lx = plot.right() + 14;
    if (s.markers_only) {
      doc.circle(lx + 11, ly, 5, {{"fill", color}});
    } else {
      doc.line(lx, ly, lx + 22, ly, {{"stroke", color}, {"stroke-width", 2}, {"stroke-dasharray", dash}});
    }
    doc.text(lx + 28, ly + 4, s.name);
    ly += 20;
  }
  return doc.finish();
}

// Grouped bars: one group per category, one bar per series (values in percent).
std::string render_bars(const std::string& title, const std::string& subtitle, const std::string& y_label,
                        const std::vector<std::string>& categories, const std::vector<svg_series>& series) {
  const double h = 420, left = 64, top = 58, bottom = 56, plot_w = 466;
  const double right = legend_margin(series, 230, 38), w = left + plot_w + right;
  const svg_box plot{left, top, plot_w, h - top - bottom};
  double y1 = 100.0;
  for (const auto& s : series)
    for (auto [x, y] : s.points) y1 = std::max(y1, y);
  const svg_scale ty{0.0, y1, plot.bottom(), plot.top};
  svg_document doc = start_chart(w, h, title, subtitle);
  for (double v : nice_ticks(0.0, y1, false)) doc.y_gridline(plot, ty(v), tick_text(v), "#e5e5e5", 6);
  const double group_w = plot.width / static_cast<double>(categories.size());
  const double bar_w = group_w * 0.8 / static_cast<double>(series.size());
  const auto color_of = [&](std::size_t i) {
    return series[i].color.empty() ? std::string(kColors[i % std::size(kColors)]) : series[i].color;
  };
  for (std::size_t g = 0; g < categories.size(); ++g) {
    const double gx = plot.left + group_w * static_cast<double>(g) + group_w * 0.1;
    for (std::size_t i = 0; i < series.size(); ++i) {
      for (auto [x, y] : series[i].points) {
        if (static_cast<std::size_t>(x) != g || !std::isfinite(y)) continue;
        const double bx = gx + bar_w * static_cast<double>(i);
        const double bar_top = ty(std::max(0.0, y));
        doc.rect(bx, bar_top, bar_w - 2, ty(0) - bar_top,
                 {{"fill", color_of(i)}, {"fill-opacity", series[i].dashed ? "0.45" : ""}});
        doc.text(bx + bar_w / 2 - 1, bar_top - 4, fmt("%.0f", y), {{"text-anchor", "middle"}, {"font-size", 10}});
      }
    }
    doc.text(gx + group_w * 0.4, plot.bottom() + 16, categories[g], {{"text-anchor", "middle"}});
  }
  doc.rect(plot.left, plot.top, plot.width, plot.height, {{"fill", "none"}, {"stroke", "#333"}});
  doc.vertical_text(18, plot.top + plot.height / 2, y_label, {{"text-anchor", "middle"}});
  double ly = top + 8;
  for (std::size_t i = 0; i < series.size(); ++i) {
    doc.rect(plot.right() + 14, ly - 6, 18, 12,
             {{"fill", color_of(i)}, {"fill-opacity", series[i].dashed ? "0.45" : ""}});
    doc.text(plot.right() + 38, ly + 4, series[i].name);
    ly += 20;
  }
  return doc.finish();
}

double to_mib(std::size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

const named_figure* find_figure(const sweep_result& s, const std::string& key) {
  for (const auto& f : s.figures)
    if (f.key == key) return &f;
  return nullptr;
}

// Memory against size (log-log), one series per run label, the slope in the legend.
svg_chart memory_chart(const sweep_result& s, const std::string& title, const std::string& x_label) {
  svg_chart c;
  c.title = title;
  c.subtitle = "host device; solid: resident (allocated - evicted), dashed: mapped; both less persistent state";
  c.x_label = x_label;
  c.y_label = "feature-map memory (MiB, log scale)";
  c.log_x = c.log_y = true;
  std::vector<std::string> labels;
  for (const auto& p : s.points) {
    c.x_ticks.push_back(static_cast<double>(p.size));
    for (const auto& r : p.runs)
      if (std::find(labels.begin(), labels.end(), r.label) == labels.end()) labels.push_back(r.label);
  }
  std::size_t k = 0;
  for (const auto& label : labels) {
    svg_series resident, mapped;
    resident.name = label;
    if (const auto* f = find_figure(s, key_of(label) + "_feature_map_slope")) resident.name += fmt(", slope %.2f", f->value);
    mapped.name = label + ", mapped";
    if (const auto* f = find_figure(s, key_of(label) + "_mapped_feature_map_slope")) mapped.name += fmt(" (%.2f)", f->value);
    resident.color = mapped.color = kColors[k++ % std::size(kColors)];
    mapped.dashed = true;
    for (const auto& p : s.points) {
      for (const auto& r : p.runs) {
        if (r.label != label || (r.status != "ok" && r.status != "unsteady")) continue;
        const double x = static_cast<double>(p.size);
        if (r.resident_feature_map_bytes > 0) resident.points.emplace_back(x, to_mib(r.resident_feature_map_bytes));
        if (r.feature_map_bytes > 0) mapped.points.emplace_back(x, to_mib(r.feature_map_bytes));
      }
    }
    c.series.push_back(resident);
    c.series.push_back(mapped);
  }
  return c;
}

svg_chart time_chart(const sweep_result& s, const std::string& title, const std::string& x_label, double target) {
  svg_chart c;
  c.title = title;
  c.subtitle = "median steady iteration / the baseline's, same process (shared 2-core host)";
  c.x_label = x_label;
  c.y_label = "time against the baseline (x)";
  c.log_x = true;
  c.y_floor = 1.0;
  std::vector<std::string> labels;
  for (const auto& p : s.points) {
    c.x_ticks.push_back(static_cast<double>(p.size));
    for (const auto& r : p.runs)
      if (!r.policy.empty() && std::find(labels.begin(), labels.end(), r.label) == labels.end()) labels.push_back(r.label);
  }
  std::size_t k = 1;
  for (const auto& label : labels) {
    svg_series cpu, wall;
    cpu.name = label + ", CPU time";
    wall.name = label + ", wall time";
    cpu.color = wall.color = kColors[k++ % std::size(kColors)];
    wall.dashed = true;
    for (const auto& p : s.points)
      for (const auto& r : p.runs) {
        if (r.label != label || r.status != "ok") continue;
        cpu.points.emplace_back(static_cast<double>(p.size), r.cpu_ratio);
        wall.points.emplace_back(static_cast<double>(p.size), r.time_ratio);
      }
    c.series.push_back(cpu);
    c.series.push_back(wall);
  }
  svg_series t;
  t.name = fmt("target %.2fx", target);
  t.color = "#999";
  t.dashed = true;
  t.markers = false;
  t.points = {{c.x_ticks.front(), target}, {c.x_ticks.back(), target}};
  c.series.push_back(t);
  return c;
}

void write_file(const std::filesystem::path& path, const std::string& text, std::vector<std::string>& written) {
  write_file_atomically(path.string(), text);
  written.push_back(path.string());
}

}  // namespace

std::vector<std::string> write_plots(const std::string& dir, std::span<const sweep_result> sweeps) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> written;
  const std::filesystem::path d(dir);
  for (const auto& s : sweeps) {
    if (s.points.empty()) continue;
    if (s.id == "depth") {
      write_file(d / "depth_memory.svg", render_chart(memory_chart(s, "ResNet: feature-map memory against depth", "depth (layers, log scale)")),
                 written);
      write_file(d / "depth_time.svg",
                 render_chart(time_chart(s, "ResNet: time overhead against depth", "depth (layers, log scale)", 1.35)),
                 written);
    } else if (s.id == "lstm") {
      write_file(d / "lstm_memory.svg",
                 render_chart(memory_chart(s, "LSTM: feature-map memory against length", "sequence length (steps, log scale)")),
                 written);
    } else if (s.id == "budget") {
      for (const auto& p : s.points) {
        svg_chart c;
        c.title = p.model + ": time overhead against budget";
        c.subtitle = "CPU time of a steady iteration / the baseline's; infeasible budgets left out";
        c.x_label = "budget (share of the traced peak)";
        c.y_label = "CPU time against the baseline (x)";
        c.x_ticks = {0.25, 0.5, 0.75};
        c.y_floor = 1.0;
        std::vector<std::string> labels;
        for (const auto& r : p.runs)
          if (!r.policy.empty() && std::find(labels.begin(), labels.end(), r.label) == labels.end())
            labels.push_back(r.label);
        std::size_t k = 0;
        for (const auto& label : labels) {
          svg_series ser;
          ser.name = label;
          ser.color = kColors[k++ % std::size(kColors)];
          for (const auto& r : p.runs) {
            if (r.label != label || r.status != "ok") continue;
            double f = 0.0;
            std::from_chars(r.budget_rule.data(), r.budget_rule.data() + r.budget_rule.size(), f);
            if (f > 0.0) ser.points.emplace_back(f, r.cpu_ratio);
          }
          std::sort(ser.points.begin(), ser.points.end());
          if (!ser.points.empty()) c.series.push_back(ser);
        }
        svg_series dtr;
        dtr.name = "DTR, published (GPU wall)";
        dtr.color = "#000";
        dtr.markers_only = true;
        dtr.points = {{0.45, 1.19}, {0.45, 1.42}, {0.39, 1.52}, {0.36, 1.41}, {0.24, 1.59}};
        c.series.push_back(dtr);
        svg_series target;
        target.name = "target (1.4x, 1.15x)";
        target.color = "#999";
        target.dashed = true;
        target.points = {{0.25, 1.4}, {0.5, 1.15}};
        c.series.push_back(target);
        write_file(d / ("budget_" + p.model + ".svg"), render_chart(c), written);
      }
    } else if (s.id == "reforward") {
      std::vector<std::string> categories;
      svg_series cut{"memory cut, ours (smallest budget)", kColors[0], {}, false, false};
      svg_series at_cut{"memory cut, ours (at the paper's cut)", kColors[2], {}, false, false};
      svg_series paper_cut{"memory cut, paper", kColors[0], {}, true, false};
      svg_series over{"time overhead, ours (smallest budget)", kColors[1], {}, false, false};
      svg_series at_over{"time overhead, ours (at the paper's cut)", kColors[3], {}, false, false};
      svg_series paper_over{"time overhead, paper", kColors[1], {}, true, false};
      for (std::size_t i = 0; i < s.points.size(); ++i) {
        const auto& p = s.points[i];
        std::string name = p.shape.substr(0, p.shape.find(' '));
        categories.push_back(name);
        const double x = static_cast<double>(i);
        if (const auto* f = find_figure(s, p.model + "_memory_cut")) cut.points.emplace_back(x, 100 * f->value);
        if (const auto* f = find_figure(s, p.model + "_wall_time_overhead")) over.points.emplace_back(x, 100 * f->value);
        if (const auto* f = find_figure(s, p.model + "_at_paper_cut_memory_cut")) at_cut.points.emplace_back(x, 100 * f->value);
        if (const auto* f = find_figure(s, p.model + "_at_paper_cut_wall_time_overhead"))
          at_over.points.emplace_back(x, 100 * f->value);
        if (const auto* f = find_figure(s, p.model + "_paper_memory_cut")) paper_cut.points.emplace_back(x, 100 * f->value);
        if (const auto* f = find_figure(s, p.model + "_paper_time_overhead"))
          paper_over.points.emplace_back(x, 100 * f->value);
      }
      write_file(d / "reforward.svg",
                 render_bars("Re-forwarding-style table: memory cut and time overhead",
                             "ours: host device, peak mapped, wall time against a paired twin; paper: Feng & Huang "
                             "2018 (GPU)",
                             "percent", categories, {cut, at_cut, paper_cut, over, at_over, paper_over}),
                 written);
    }
  }
  return written;
}

}  // namespace sublinear::cli::bench
