#include "common/text.hpp"
#include "workloads/training.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>

#include "sublinear/error.hpp"
#include "sublinear/sublinear.h"

namespace sublinear::workloads {
namespace {

// The streams and events of a two-stream run, created and destroyed with the run.
class side_stream {
 public:
  explicit side_stream(context& main)
      : dev_(main.dev),
        stream_(dev_.create_stream()),
        ctx_{dev_, stream_, main.mem},
        batch_allocated_(dev_.create_event()),
        batch_uploaded_(dev_.create_event()),
        grads_ready_(dev_.create_event()),
        params_ready_(dev_.create_event()) {}
  ~side_stream() {
    dev_.synchronize();
    dev_.destroy_event(params_ready_);
    dev_.destroy_event(grads_ready_);
    dev_.destroy_event(batch_uploaded_);
    dev_.destroy_event(batch_allocated_);
    dev_.destroy_stream(stream_);
  }
  side_stream(const side_stream&) = delete;
  side_stream& operator=(const side_stream&) = delete;

  context& ctx() { return ctx_; }
  device::host::event* batch_allocated() { return batch_allocated_; }
  device::host::event* batch_uploaded() { return batch_uploaded_; }
  device::host::event* grads_ready() { return grads_ready_; }
  device::host::event* params_ready() { return params_ready_; }

 private:
  device::host::device& dev_;
  device::host::stream* stream_;
  context ctx_;
  device::host::event* batch_allocated_;
  device::host::event* batch_uploaded_;
  device::host::event* grads_ready_;
  device::host::event* params_ready_;
};

void copy_to_device(context& ctx, device::host::stream* s, const tensor& t, const std::vector<float>& values) {
  if (static_cast<std::size_t>(t.numel()) != values.size()) {
    throw config_error("synthetic batch: " + std::to_string(values.size()) + " values for a tensor of " +
                       std::to_string(t.numel()));
  }
  if (!values.empty()) ctx.dev.memcpy_async(t.data, values.data(), t.bytes(), s);
}

iteration_figures run_iteration(context& ctx, side_stream* side, models::model& m, const models::host_batch& hb,
                                std::int64_t index, std::size_t persistent) {
  ctx.mem.reset_peaks();
  const auto start = std::chrono::steady_clock::now();

  models::batch b;
  b.input = ctx.empty(hb.input_shape);
  b.target = ctx.empty(hb.target_shape);
  models::step_context sc{ctx};
  sc.index = index;
  if (side == nullptr) {
    copy_to_device(ctx, ctx.stream, b.input, hb.input);
    copy_to_device(ctx, ctx.stream, b.target, hb.target);
  } else {
    // The blocks may be reused from work still queued on the main stream.
    ctx.dev.record_event(side->batch_allocated(), ctx.stream);
    ctx.dev.stream_wait_event(side->ctx().stream, side->batch_allocated());
    copy_to_device(ctx, side->ctx().stream, b.input, hb.input);
    copy_to_device(ctx, side->ctx().stream, b.target, hb.target);
    ctx.dev.record_event(side->batch_uploaded(), side->ctx().stream);
    // Everything later on the main stream (the step, the batch's free and any reuse of
    // its blocks) is ordered after the copy, so no record_stream is needed.
    ctx.dev.stream_wait_event(ctx.stream, side->batch_uploaded());
    sc.side = &side->ctx();
    sc.grads_ready = side->grads_ready();
    sc.params_ready = side->params_ready();
  }

  tensor loss = m.train_step(sc, b);
  float loss_value = 0.0f;
  ctx.dev.memcpy_async(&loss_value, loss.data, sizeof(float), ctx.stream);
  ctx.release(loss);
  ctx.release(b.target);
  ctx.release(b.input);
  ctx.dev.synchronize();
  const auto stop = std::chrono::steady_clock::now();

  const memory_stats st = ctx.mem.stats();
  iteration_figures f;
  f.index = index;
  f.seconds = std::chrono::duration<double>(stop - start).count();
  f.peak_mapped_bytes = st.mapped_peak;
  f.peak_allocated_bytes = st.allocated_peak;
  // Resident bytes: under sublinear an evicted activation is allocated but has no pages.
  f.feature_map_bytes = st.resident_peak > persistent ? st.resident_peak - persistent : 0;
  f.end_allocated_bytes = st.allocated;
  f.loss = loss_value;
  return f;
}

}  // namespace

std::size_t training_figures::peak_mapped_bytes() const {
  std::size_t v = 0;
  for (const auto& i : iterations) v = std::max(v, i.peak_mapped_bytes);
  return v;
}

std::size_t training_figures::peak_allocated_bytes() const {
  std::size_t v = 0;
  for (const auto& i : iterations) v = std::max(v, i.peak_allocated_bytes);
  return v;
}

std::size_t training_figures::feature_map_bytes() const {
  std::size_t v = 0;
  for (const auto& i : iterations) v = std::max(v, i.feature_map_bytes);
  return v;
}

double training_figures::iteration_seconds() const {
  if (iterations.empty()) return 0.0;
  std::vector<double> t;
  for (std::size_t i = iterations.size() > 1 ? 1 : 0; i < iterations.size(); ++i) t.push_back(iterations[i].seconds);
  std::sort(t.begin(), t.end());
  const std::size_t n = t.size();
  return n % 2 == 1 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

training_figures train(context& ctx, models::model& m, const training_options& options) {
  if (options.iterations < 1) {
    throw config_error("training: iterations must be >= 1, got " + std::to_string(options.iterations));
  }
  if (options.streams != 1 && options.streams != 2) {
    throw config_error("training: streams must be 1 or 2, got " + std::to_string(options.streams));
  }
  if (options.distinct_batches < 0) {
    throw config_error("training: distinct_batches must be >= 0, got " + std::to_string(options.distinct_batches));
  }
  if (!m.initialized()) m.init(ctx, options.seed);
  ctx.dev.synchronize();

  training_figures out;
  out.model = m.name();
  out.description = m.description();
  out.parameter_count = m.parameter_count();
  out.persistent_bytes = ctx.mem.stats().allocated;

  std::unique_ptr<side_stream> side;
  if (options.streams == 2) side = std::make_unique<side_stream>(ctx);
  models::host_batch hb;  // outlives the copies queued from it, even when a step throws
  try {
    for (std::int64_t i = 0; i < options.iterations; ++i) {
      // The data loader's work: made before the iteration's clock starts.
      hb = m.make_batch(options.seed, options.distinct_batches > 0 ? i % options.distinct_batches : i);
      out.iterations.push_back(run_iteration(ctx, side.get(), m, hb, i, out.persistent_bytes));
      if (options.on_iteration_end) options.on_iteration_end(out.iterations.back());
    }
  } catch (...) {
    // Queued work may still read the host batch or write blocks being unwound.
    ctx.dev.synchronize();
    throw;
  }
  side.reset();
  out.params_hash = parameters_hash(ctx, m);
  return out;
}

std::vector<std::vector<float>> download_parameters(context& ctx, const models::model& m) {
  std::vector<std::vector<float>> out;
  for (const tensor& p : m.parameters()) {
    out.emplace_back(static_cast<std::size_t>(p.numel()));
    if (p.numel() > 0) ctx.dev.memcpy_async(out.back().data(), p.data, p.bytes(), ctx.stream);
  }
  ctx.dev.synchronize();
  return out;
}

std::uint64_t parameters_hash(context& ctx, const models::model& m) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const auto& values : download_parameters(ctx, m)) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
    for (std::size_t i = 0; i < values.size() * sizeof(float); ++i) {
      h ^= bytes[i];
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

// ---- JSON ------------------------------------------------------------------------------

std::string json_string(std::string_view s) { return json_quote(s); }

namespace {

// Shortest text that reads back as the same double; JSON has no NaN or infinity.
std::string json_number(double v) {
  if (!(v == v) || v > 1.7976931348623157e308 || v < -1.7976931348623157e308) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  for (int digits = 6; digits < 17; ++digits) {
    char shorter[32];
    std::snprintf(shorter, sizeof shorter, "%.*g", digits, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

std::string hex64(std::uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Writes `"key": value` members separated by commas.
class members {
 public:
  members(std::ostream& out, std::string indent) : out_(out), indent_(std::move(indent)) {}
  void raw(const std::string& key, const std::string& value) {
    out_ << (first_ ? "" : ",\n") << indent_ << json_string(key) << ": " << value;
    first_ = false;
  }
  void number(const std::string& key, double v) { raw(key, json_number(v)); }
  void integer(const std::string& key, std::uint64_t v) { raw(key, std::to_string(v)); }
  void text(const std::string& key, std::string_view v) { raw(key, json_string(v)); }

 private:
  std::ostream& out_;
  std::string indent_;
  bool first_ = true;
};

}  // namespace

void write_figures_json(std::ostream& out, const models::model_config& requested, std::span<const report_run> runs,
                        std::span<const std::pair<std::string, std::string>> extra) {
  if (runs.empty() || runs.front().figures == nullptr) throw config_error("figures report: no run to write");
  const std::size_t iterations = runs.front().figures->iterations.size();
  for (const auto& r : runs) {
    if (r.figures == nullptr || r.figures->iterations.size() != iterations) {
      throw config_error("figures report: every run must have the same number of iterations");
    }
  }
  const models::model_config config = models::with_defaults(requested);
  const training_figures& first = *runs.front().figures;

  out << "{\n";
  members top(out, "  ");
  top.integer("schema_version", 1);
  top.text("device", "host");
  top.text("model", first.model);
  top.text("kind", models::to_string(config.kind));
  top.text("description", first.description);
  if (models::uses_depth(config.kind)) top.integer("depth", static_cast<std::uint64_t>(config.depth));
  if (models::uses_seq_len(config.kind)) top.integer("seq_len", static_cast<std::uint64_t>(config.seq_len));
  top.integer("batch", static_cast<std::uint64_t>(config.batch));
  top.integer("iterations", iterations);
  top.integer("parameters", static_cast<std::uint64_t>(first.parameter_count));
  for (const auto& [key, value] : extra) top.raw(key, value);

  for (const auto& r : runs) {
    const training_figures& f = *r.figures;
    const std::string& p = r.key_prefix;
    top.integer(p + "peak_bytes", f.peak_mapped_bytes());
    top.integer(p + "allocated_peak_bytes", f.peak_allocated_bytes());
    top.integer(p + "feature_map_bytes", f.feature_map_bytes());
    top.integer(p + "persistent_bytes", f.persistent_bytes);
    top.number(p + "iter_s", f.iteration_seconds());
    top.number(p + "first_iter_s", f.iterations.front().seconds);
    top.number(p + "final_loss", f.iterations.back().loss);
    top.text(p + "params_hash", hex64(f.params_hash));
    for (const auto& [key, value] : r.extra) top.raw(p + key, value);
  }

  std::string rows = "[";
  for (std::size_t i = 0; i < iterations; ++i) {
    std::ostringstream row;
    row << (i == 0 ? "\n" : ",\n") << "    {\n";
    members m(row, "      ");
    m.integer("iteration", i + 1);
    for (const auto& r : runs) {
      const iteration_figures& it = r.figures->iterations[i];
      const std::string& p = r.key_prefix;
      m.number(p + "iter_s", it.seconds);
      m.integer(p + "peak_bytes", it.peak_mapped_bytes);
      m.integer(p + "allocated_peak_bytes", it.peak_allocated_bytes);
      m.integer(p + "feature_map_bytes", it.feature_map_bytes);
      m.number(p + "loss", it.loss);
    }
    row << "\n    }";
    rows += row.str();
  }
  rows += "\n  ]";
  top.raw("per_iteration", rows);
  out << "\n}\n";
}

}  // namespace sublinear::workloads
