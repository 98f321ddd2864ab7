// trace_timing: how far write observation moves the kernel durations the planner is given.
//
// Note [Trace timing figures]
// Rationale: the planner prices a recomputation by the durations measured while tracing,
//   and the traced iterations also hash every block a kernel touches to find what it
//   writes (Note [Write observation]). Hashing reads the blocks, so a kernel timed just
//   after it starts on warm operands (Note [Hash reuse]). This program measures that bias
//   per kernel against timing alone.
// Approach: the runtime's recorder setup (exact large segments, the model's state
//   preexisting, durations on) on a fresh host session per run, in three modes: `timed`
//   (no hashing: the reference), `observed` (every block hashed just before each kernel,
//   without Note [Hash reuse]) and `reused` (what the runtime does). Each run
//   traces two iterations, as the engine does, and the second one's durations count. The
//   modes alternate within each round, each first in a third of the rounds, so a change
//   of load hits all three; a kernel's time is the median over the rounds of its total
//   per iteration, and a ratio the median over the rounds of that round's ratio (the
//   three runs of a round are seconds apart, the rounds are not).
// Limitations: a figures program: no assertions, and the figures depend on the machine's
//   caches. `timed` still brackets each kernel with two host functions, as every mode does.
//
//   trace_timing [--model resnet|...] [--depth N] [--seq-len N] [--rounds R] [--top K]
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "workloads/host_session.hpp"
#include "workloads/models/registry.hpp"
#include "workloads/training.hpp"
#include "sublinear/error.hpp"
#include "tracer/host/host_collector.hpp"
#include "tracer/recorder.hpp"

namespace {

namespace wl = sublinear::workloads;
namespace models = sublinear::workloads::models;
namespace tracer = sublinear::tracer;

enum class mode { timed, observed, reused };
constexpr mode modes[] = {mode::timed, mode::observed, mode::reused};
const char* name_of(mode m) { return m == mode::timed ? "timed" : m == mode::observed ? "observed" : "reused"; }

// Kernel name -> total traced seconds in the second traced iteration, and its launches.
struct kernel_times {
  std::map<std::string, double> seconds;
  std::map<std::string, std::size_t> launches;
  double iteration_s = 0.0;  // the second traced iteration's wall time, hashing included
  tracer::host_collector::before_counts before;  // over both traced iterations
};

kernel_times trace_once(const models::model_config& config, mode m) {
  wl::host_session session;
  auto ctx = session.make_context();
  auto model = models::make_model(config);
  model->init(ctx, 7);
  tracer::recorder_options ro;
  ro.device = "host";
  ro.granularity = session.allocator().granularity();
  ro.start_recording = false;
  tracer::recorder rec(ro);
  session.allocator().set_exact_large_segments(true);  // as the engine sets itself up
  auto* previous = session.allocator().set_observer(&rec);
  for (const auto& b : session.allocator().live_blocks()) rec.on_allocate(b.base, b.requested, b.stream, b.evictable);
  tracer::host_collector_options co;
  co.time_launches = true;
  co.observe_writes = m != mode::timed;
  co.reuse_hashes = m == mode::reused;
  kernel_times out;
  {
    tracer::host_collector collector(session.device(), rec, co);
    rec.start();
    rec.mark_iteration();
    wl::training_options to;
    to.iterations = 2;
    to.seed = 7;
    to.on_iteration_end = [&](const wl::iteration_figures&) {
      session.device().synchronize();
      rec.mark_iteration();
    };
    const wl::training_figures figures = wl::train(ctx, *model, to);
    out.iteration_s = figures.iterations.at(1).seconds;
    session.device().synchronize();
    out.before = collector.before_hashes();
  }
  const tracer::trace t = rec.take();
  session.allocator().set_observer(previous);
  model->release();
  const auto iterations = t.marked_iterations();
  if (iterations.size() < 2) throw sublinear::config_error("trace_timing: the trace holds fewer than two iterations");
  const tracer::event_range last = iterations.back();
  for (std::size_t i = last.begin; i < last.end; ++i) {
    const tracer::event& e = t.events[i];
    if (e.kind != tracer::event_kind::launch || (e.flags & tracer::event_flags::timed) == 0) continue;
    const std::string& name = t.kernels.at(e.kernel).name;
    out.seconds[name] += static_cast<double>(e.duration_ns) * 1e-9;
    ++out.launches[name];
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool parse_int(std::string_view v, std::int64_t& out) {
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return ec == std::errc() && ptr == v.data() + v.size();
}

int usage(const char* why) {
  std::fprintf(stderr, "trace_timing: %s\nusage: trace_timing [--model %s] [--depth N] [--seq-len N] [--rounds R] [--top K]\n",
               why, std::string(models::model_kind_names()).c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  models::model_config config;
  std::int64_t rounds = 3;
  std::int64_t top = 12;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--model" && has_value) {
      const auto kind = models::parse_model_kind(argv[++i]);
      if (!kind) return usage("--model names no model");
      config.kind = *kind;
    } else if (a == "--depth" && has_value) {
      if (!parse_int(argv[++i], config.depth) || config.depth < 1) return usage("--depth needs an integer >= 1");
    } else if (a == "--seq-len" && has_value) {
      if (!parse_int(argv[++i], config.seq_len) || config.seq_len < 1) return usage("--seq-len needs an integer >= 1");
    } else if (a == "--rounds" && has_value) {
      if (!parse_int(argv[++i], rounds) || rounds < 1) return usage("--rounds needs an integer >= 1");
    } else if (a == "--top" && has_value) {
      if (!parse_int(argv[++i], top) || top < 1) return usage("--top needs an integer >= 1");
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: trace_timing [--model %s] [--depth N] [--seq-len N] [--rounds R] [--top K]\n",
                  std::string(models::model_kind_names()).c_str());
      return 0;
    } else {
      return usage(("unknown argument '" + std::string(a) + "'").c_str());
    }
  }
  try {
    config = models::with_defaults(config);
    std::map<std::string, std::vector<double>> per_round[3];  // mode -> kernel -> seconds per round
    std::vector<double> totals[3];
    std::vector<double> iteration_s[3];
    std::map<std::string, std::size_t> launches;
    tracer::host_collector::before_counts before;
    for (std::int64_t r = 0; r < rounds; ++r) {
      for (std::size_t i = 0; i < 3; ++i) {
        const mode m = modes[(i + static_cast<std::size_t>(r)) % 3];  // each mode first in a third of the rounds
        const kernel_times k = trace_once(config, m);
        iteration_s[static_cast<int>(m)].push_back(k.iteration_s);
        if (m == mode::reused) before = k.before;
        double total = 0.0;
        for (const auto& [name, s] : k.seconds) {
          per_round[static_cast<int>(m)][name].push_back(s);
          total += s;
        }
        totals[static_cast<int>(m)].push_back(total);
        launches = k.launches;
        std::fprintf(stderr, "round %lld, %s: %.1f ms\n", static_cast<long long>(r + 1), name_of(m), total * 1e3);
      }
    }
    std::vector<std::pair<double, std::string>> order;
    for (const auto& [name, v] : per_round[0]) order.emplace_back(median(v), name);
    std::sort(order.rbegin(), order.rend());
    std::printf("%s, depth %lld, seq_len %lld: traced kernel time per iteration (median of %lld rounds)\n\n",
                std::string(models::to_string(config.kind)).c_str(), static_cast<long long>(config.depth),
                static_cast<long long>(config.seq_len), static_cast<long long>(rounds));
    std::printf("%-36s %8s %10s %10s %10s %9s %9s\n", "kernel", "launches", "timed ms", "observed", "reused",
                "obs/timed", "reu/timed");
    const auto ratio = [](const std::vector<double>& of, const std::vector<double>& to) {
      std::vector<double> r;
      for (std::size_t i = 0; i < of.size() && i < to.size(); ++i) {
        if (to[i] > 0) r.push_back(of[i] / to[i]);
      }
      return median(r);
    };
    const auto row = [&](const char* name, std::size_t n, const std::vector<double>& t, const std::vector<double>& o,
                         const std::vector<double>& u) {
      std::printf("%-36s %8zu %10.2f %10.2f %10.2f %8.2fx %8.2fx\n", name, n, median(t) * 1e3, median(o) * 1e3,
                  median(u) * 1e3, ratio(o, t), ratio(u, t));
    };
    std::int64_t shown = 0;
    for (const auto& [t, name] : order) {
      if (shown++ == top) break;
      row(name.c_str(), launches[name], per_round[0][name], per_round[1][name], per_round[2][name]);
    }
    std::size_t all_launches = 0;
    for (const auto& [name, n] : launches) all_launches += n;
    row("all kernels", all_launches, totals[0], totals[1], totals[2]);
    row("traced iteration (wall, hashing in)", 0, iteration_s[0], iteration_s[1], iteration_s[2]);
    std::printf("\nreused: of %llu blocks observed before a kernel in the two traced iterations, %llu took a kept hash\n",
                static_cast<unsigned long long>(before.hashed + before.reused),
                static_cast<unsigned long long>(before.reused));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trace_timing: %s\n", e.what());
    return 1;
  }
  return 0;
}
