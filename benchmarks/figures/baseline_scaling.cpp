// baseline_scaling: how feature-map memory and iteration time grow with ResNet depth and
// LSTM length when nothing is recomputed — the linear growth Chen et al. 2016 start from.
//
// Note [Baseline scaling figures]
// Rationale: the claim sublinear must beat is that storing every activation makes
//   feature-map memory O(n) in the number of layers (or steps). This program measures that
//   baseline on the host device with the same models, loop and allocator the demo uses,
//   and fits the exponent, so docs/workloads.md and the reports quote measured figures.
// Approach: for each size, a fresh host_session (no cache carried over), a few iterations
//   of the model at its demo defaults; report feature-map bytes (Note [Feature-map
//   memory]), peak mapped bytes and the iteration time (the best and the median of the
//   iterations after the first: on a shared machine the best is the steadier figure, and
//   the fits use it); fit log y = a + s log n by least squares and print s. A line a + b n has s < 1 when a > 0, so the
//   per-layer increment (the slope of the plain fit) is printed too.
// Limitations: a figures program, not a test: no assertions, and times depend on the
//   machine (the host device runs kernels on one CPU thread per stream).
//
//   baseline_scaling [--iterations K] [--quick] [--json PATH]
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/atomic_file.hpp"
#include "workloads/host_session.hpp"
#include "workloads/models/registry.hpp"
#include "workloads/training.hpp"
#include "sublinear/error.hpp"

namespace {

namespace wl = sublinear::workloads;
namespace models = sublinear::workloads::models;

struct point {
  std::int64_t size = 0;  // depth or sequence length
  std::size_t feature_map_bytes = 0;
  std::size_t peak_mapped_bytes = 0;
  std::size_t persistent_bytes = 0;
  double iter_s = 0.0;         // best iteration time, the first left out
  double iter_median_s = 0.0;  // training_figures::iteration_seconds()
};

struct fit {
  double loglog_slope = 0.0;  // exponent s in y ~ n^s
  double per_unit = 0.0;      // b in y = a + b n
  double intercept = 0.0;     // a
};

fit fit_points(const std::vector<double>& xs, const std::vector<double>& ys) {
  const auto least_squares = [](const std::vector<double>& x, const std::vector<double>& y, double& slope,
                                double& intercept) {
    const double n = static_cast<double>(x.size());
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      sx += x[i];
      sy += y[i];
      sxx += x[i] * x[i];
      sxy += x[i] * y[i];
    }
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    intercept = (sy - slope * sx) / n;
  };
  fit f;
  std::vector<double> lx, ly;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    lx.push_back(std::log(xs[i]));
    ly.push_back(std::log(ys[i]));
  }
  double unused = 0;
  least_squares(lx, ly, f.loglog_slope, unused);
  least_squares(xs, ys, f.per_unit, f.intercept);
  return f;
}

point measure(models::model_config config, std::int64_t size, std::int64_t iterations) {
  wl::host_session session;
  wl::context ctx = session.make_context();
  auto m = models::make_model(config);
  wl::training_options o;
  o.iterations = iterations;
  const auto f = wl::train(ctx, *m, o);
  double best = f.iterations.back().seconds;
  for (std::size_t i = f.iterations.size() > 1 ? 1 : 0; i < f.iterations.size(); ++i) {
    best = std::min(best, f.iterations[i].seconds);
  }
  return point{size,        f.feature_map_bytes(), f.peak_mapped_bytes(), f.persistent_bytes,
               best,        f.iteration_seconds()};
}

double mib(std::size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

struct series {
  std::string name;      // "resnet" / "lstm"
  std::string size_key;  // "depth" / "seq_len"
  std::string title;
  std::vector<point> points;
  fit memory, time;
};

series sweep(models::model_kind kind, const std::vector<std::int64_t>& sizes, std::int64_t iterations) {
  series s;
  s.name = std::string(models::to_string(kind));
  const bool by_depth = kind != models::model_kind::lstm;
  s.size_key = by_depth ? "depth" : "seq_len";
  {
    models::model_config c{kind, 0, 0, 0};
    (by_depth ? c.depth : c.seq_len) = sizes.front();
    s.title = models::make_model(c)->description();
  }
  std::printf("\n%s (%s), %lld iterations per point\n", s.name.c_str(), s.title.c_str(),
              static_cast<long long>(iterations));
  std::printf("  %8s  %14s  %14s  %14s  %12s  %12s\n", s.size_key.c_str(), "feature maps", "peak mapped",
              "persistent", "iter (best)", "iter (median)");
  std::vector<double> xs, mem, time;
  for (std::int64_t n : sizes) {
    models::model_config c{kind, 0, 0, 0};
    (by_depth ? c.depth : c.seq_len) = n;
    const point p = measure(c, n, iterations);
    std::printf("  %8lld  %10.2f MiB  %10.2f MiB  %10.2f MiB  %10.3f s  %11.3f s\n", static_cast<long long>(n),
                mib(p.feature_map_bytes), mib(p.peak_mapped_bytes), mib(p.persistent_bytes), p.iter_s, p.iter_median_s);
    std::fflush(stdout);
    s.points.push_back(p);
    xs.push_back(static_cast<double>(n));
    mem.push_back(static_cast<double>(p.feature_map_bytes));
    time.push_back(p.iter_s);
  }
  s.memory = fit_points(xs, mem);
  s.time = fit_points(xs, time);
  std::printf("  log-log slope: feature maps %.3f, iteration time %.3f\n", s.memory.loglog_slope,
              s.time.loglog_slope);
  std::printf("  linear fit: feature maps %.1f KiB + %.2f KiB per %s; time %.2f ms + %.3f ms per %s\n",
              s.memory.intercept / 1024.0, s.memory.per_unit / 1024.0, by_depth ? "layer" : "step",
              s.time.intercept * 1e3, s.time.per_unit * 1e3, by_depth ? "layer" : "step");
  return s;
}

void write_json(const std::string& path, const std::vector<series>& all) {
  std::ostringstream out;
  out << "{\n  \"device\": \"host\",\n  \"series\": [";
  for (std::size_t i = 0; i < all.size(); ++i) {
    const series& s = all[i];
    out << (i ? ",\n" : "\n") << "    {\"model\": " << wl::json_string(s.name)
        << ", \"description\": " << wl::json_string(s.title) << ",\n"
        << "     \"feature_map_loglog_slope\": " << s.memory.loglog_slope
        << ", \"time_loglog_slope\": " << s.time.loglog_slope << ",\n     \"points\": [";
    for (std::size_t j = 0; j < s.points.size(); ++j) {
      const point& p = s.points[j];
      out << (j ? ", " : "") << "{\"" << s.size_key << "\": " << p.size
          << ", \"feature_map_bytes\": " << p.feature_map_bytes << ", \"peak_bytes\": " << p.peak_mapped_bytes
          << ", \"persistent_bytes\": " << p.persistent_bytes << ", \"iter_s\": " << p.iter_s
          << ", \"iter_median_s\": " << p.iter_median_s << "}";
    }
    out << "]}";
  }
  out << "\n  ]\n}\n";
  sublinear::write_file_atomically(path, out.str());
}

int usage(const char* why) {
  std::fprintf(stderr, "baseline_scaling: %s\nusage: baseline_scaling [--iterations K] [--quick] [--json PATH]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t iterations = 3;
  bool quick = false;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--iterations" && i + 1 < argc) {
      const std::string_view v = argv[++i];
      const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), iterations);
      if (ec != std::errc() || ptr != v.data() + v.size() || iterations < 1) return usage("--iterations needs an integer >= 1");
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: baseline_scaling [--iterations K] [--quick] [--json PATH]\n");
      return 0;
    } else {
      return usage(("unknown argument '" + std::string(a) + "'").c_str());
    }
  }
  try {
    if (!json.empty()) sublinear::check_file_writable(json);  // now, not after the sweeps
    const std::vector<std::int64_t> depths =
        quick ? std::vector<std::int64_t>{20, 56, 110} : std::vector<std::int64_t>{20, 56, 110, 218, 500, 1202};
    const std::vector<std::int64_t> lengths = quick ? std::vector<std::int64_t>{64, 128, 256}
                                                    : std::vector<std::int64_t>{64, 128, 256, 512, 1024, 2048};
    std::vector<series> all;
    all.push_back(sweep(models::model_kind::resnet, depths, iterations));
    all.push_back(sweep(models::model_kind::lstm, lengths, iterations));
    if (!json.empty()) {
      write_json(json, all);
      std::printf("\nfigures written to %s\n", json.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baseline_scaling: %s\n", e.what());
    return 1;
  }
  return 0;
}
