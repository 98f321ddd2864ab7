#include "policy/oracle/milp.hpp"

#include <Cbc_C_Interface.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "policy/candidates.hpp"
#include "policy/recipe.hpp"
#include "policy/simulator.hpp"

namespace sublinear::policy::oracle {

namespace {

constexpr double bytes_scale = 1.0 / 1024.0;  // KiB
constexpr double cost_scale = 1e6;            // microseconds

struct model_deleter {
  void operator()(Cbc_Model* m) const noexcept { Cbc_deleteModel(m); }
};

class lp {
 public:
  lp() : m_(Cbc_newModel()) {}

  int binary() { return column(0.0, 1.0, 0.0, true); }
  int integer(double ub) { return column(0.0, ub, 0.0, true); }
  int continuous(double obj) { return column(0.0, 1.0, obj, false); }

  // sum(coef * x) sense rhs, sense one of 'L', 'G', 'E'.
  void row(const std::vector<std::pair<int, double>>& terms, char sense, double rhs) {
    std::map<int, double> merged;
    for (const auto& [c, v] : terms) merged[c] += v;
    std::vector<int> cols;
    std::vector<double> vals;
    for (const auto& [c, v] : merged) {
      if (v == 0.0) continue;
      cols.push_back(c);
      vals.push_back(v);
    }
    Cbc_addRow(m_.get(), "", static_cast<int>(cols.size()), cols.data(), vals.data(), sense, rhs);
    ++rows_;
  }

  [[nodiscard]] Cbc_Model* get() const noexcept { return m_.get(); }
  [[nodiscard]] std::size_t columns() const noexcept { return static_cast<std::size_t>(columns_); }
  [[nodiscard]] std::size_t rows() const noexcept { return rows_; }

 private:
  int column(double lb, double ub, double obj, bool integer) {
    Cbc_addCol(m_.get(), "", lb, ub, obj, integer ? 1 : 0, 0, nullptr, nullptr);
    return columns_++;
  }

  std::unique_ptr<Cbc_Model, model_deleter> m_;
  int columns_ = 0;
  std::size_t rows_ = 0;
};

}  // namespace

milp_result solve_milp(const iteration& it, std::size_t budget, const milp_options& options) {
  milp_result out;
  const dataflow df(it);
  const candidate_set cs(df);
  const std::size_t k = cs.size();
  const std::size_t n = it.launches.size();
  const std::size_t g = it.granularity == 0 ? 1 : it.granularity;
  out.candidates = k;
  if (k > options.max_candidates) return out;

  // Restore moments and, per candidate, the moments inside its gap.
  std::vector<launch_id> moments;
  for (const candidate& c : cs.all()) moments.push_back(c.restore_before);
  std::sort(moments.begin(), moments.end());
  moments.erase(std::unique(moments.begin(), moments.end()), moments.end());

  lp model;
  std::vector<int> d(k);
  std::vector<std::vector<std::pair<launch_id, int>>> gvar(k);  // (moment, column), ascending
  for (std::size_t c = 0; c < k; ++c) {
    d[c] = model.binary();
    for (launch_id t : moments) {
      if (cs[c].evict_after < t && t <= cs[c].restore_before) gvar[c].emplace_back(t, model.binary());
    }
  }
  auto g_at = [&](std::size_t c, launch_id t) -> int {  // column of g_{c,t'} with t' the last moment <= t, or -1
    int col = -1;
    for (const auto& [m, v] : gvar[c]) {
      if (m > t) break;
      col = v;
    }
    return col;
  };
  // dg_{c,t} as terms.
  auto delta_terms = [&](std::size_t c, std::size_t pos, double sign) {
    std::vector<std::pair<int, double>> terms{{gvar[c][pos].second, sign}};
    if (pos > 0) terms.emplace_back(gvar[c][pos - 1].second, -sign);
    return terms;
  };
  for (std::size_t c = 0; c < k; ++c) {
    for (std::size_t p = 0; p + 1 < gvar[c].size(); ++p) {
      model.row({{gvar[c][p].second, 1.0}, {gvar[c][p + 1].second, -1.0}}, 'L', 0.0);  // monotone
    }
    model.row({{gvar[c].back().second, 1.0}, {d[c], -1.0}}, 'E', 0.0);  // back by its restore point
  }

  // Regeneration recipes W_t(c). needers[(x, t)]: the (candidate, position) pairs whose
  // regeneration at t reads candidate x in place.
  recipe_builder rb(df);
  std::map<std::pair<std::uint32_t, launch_id>, std::vector<std::pair<std::size_t, std::size_t>>> needers;
  std::map<std::pair<launch_id, launch_id>, int> u;     // (launch, moment) -> column
  std::map<std::pair<buffer_id, launch_id>, int> w;     // (temporary, moment) -> column
  for (std::size_t c = 0; c < k; ++c) {
    for (std::size_t p = 0; p < gvar[c].size(); ++p) {
      const launch_id t = gvar[c][p].first;
      const buffer_id target[] = {cs[c].buffer};
      const recipe_result rr = rb.build(target, t, {}, evicted_inputs::temporary);
      if (!rr.ok) {
        model.row(delta_terms(c, p, 1.0), 'E', 0.0);  // cannot be regenerated here
        continue;
      }
      for (launch_id l : rr.launches) {
        auto [pos, inserted] = u.emplace(std::make_pair(l, t), 0);
        if (inserted) pos->second = model.continuous(it.launches[l].cost_s * cost_scale);
        std::vector<std::pair<int, double>> terms{{pos->second, 1.0}};
        for (const auto& term : delta_terms(c, p, -1.0)) terms.push_back(term);
        model.row(terms, 'G', 0.0);  // u >= dg
      }
      for (buffer_id x : rr.temporaries) {
        auto [pos, inserted] = w.emplace(std::make_pair(x, t), 0);
        if (inserted) pos->second = model.continuous(0.0);
        std::vector<std::pair<int, double>> terms{{pos->second, 1.0}};
        for (const auto& term : delta_terms(c, p, -1.0)) terms.push_back(term);
        const std::uint32_t xc = cs.index_of(x);
        if (xc != none) {
          for (std::size_t q = 0; q < gvar[xc].size(); ++q) {
            if (gvar[xc][q].first == t) {
              for (const auto& term : delta_terms(xc, q, 1.0)) terms.push_back(term);
            }
          }
        }
        model.row(terms, 'G', 0.0);  // w >= dg - dg_x
      }
      for (buffer_id x : rr.inputs) {
        const std::uint32_t xc = cs.index_of(x);
        if (xc == none || !(cs[xc].evict_after < t && t <= cs[xc].restore_before)) continue;
        const int gx = g_at(xc, t);
        needers[{xc, t}].emplace_back(c, p);
        // g_x >= dg + d_x - 1
        std::vector<std::pair<int, double>> terms{{gx, 1.0}, {d[xc], -1.0}};
        for (const auto& term : delta_terms(c, p, -1.0)) terms.push_back(term);
        model.row(terms, 'G', -1.0);
      }
    }
  }

  // A candidate comes back before its own restore point only when a recipe needs it then
  // (the drop-set plan never prefetches).
  for (std::size_t c = 0; c < k; ++c) {
    for (std::size_t p = 0; p + 1 < gvar[c].size(); ++p) {
      std::vector<std::pair<int, double>> terms = delta_terms(c, p, 1.0);
      const auto found = needers.find({static_cast<std::uint32_t>(c), gvar[c][p].first});
      if (found != needers.end()) {
        for (const auto& [y, q] : found->second) {
          for (const auto& term : delta_terms(y, q, -1.0)) terms.push_back(term);
        }
      }
      model.row(terms, 'L', 0.0);
    }
  }

  // Memory during every launch, and at every restore moment.
  std::vector<double> constant(n, 0.0);
  {
    std::vector<double> delta(n + 1, 0.0);
    for (buffer_id b = 0; b < it.buffers.size(); ++b) {
      const buffer& buf = it.buffers[b];
      const std::size_t lo = std::min<std::size_t>(buf.alloc_at, n);
      const std::size_t hi = buf.free_at == none ? n : std::min<std::size_t>(buf.free_at, n);
      if (lo >= hi) continue;
      const std::uint32_t c = cs.index_of(b);
      // A candidate's 512-rounded bytes are counted here and taken back through d below.
      const double sz = static_cast<double>(c == none ? round_up(buf.size, unplanned_rounding) : cs[c].unplanned_bytes);
      delta[lo] += sz;
      delta[hi] -= sz;
    }
    double level = 0.0;
    for (std::size_t t = 0; t < n; ++t) {
      level += delta[t];
      constant[t] = level;
    }
  }
  std::vector<std::vector<std::pair<int, double>>> mem(n);
  for (std::size_t c = 0; c < k; ++c) {
    const candidate& cd = cs[c];
    const buffer& buf = it.buffers[cd.buffer];
    const std::size_t lo = std::min<std::size_t>(buf.alloc_at, n);
    const std::size_t hi = buf.free_at == none ? n : std::min<std::size_t>(buf.free_at, n);
    for (std::size_t t = lo; t < hi; ++t) {
      mem[t].emplace_back(d[c], -static_cast<double>(cd.unplanned_bytes));
      if (t > cd.evict_after && t < cd.restore_before) {
        const int gc = g_at(c, static_cast<launch_id>(t));
        if (gc >= 0) mem[t].emplace_back(gc, static_cast<double>(cd.bytes));
      } else {
        mem[t].emplace_back(d[c], static_cast<double>(cd.bytes));
      }
    }
  }
  const double cap = static_cast<double>(budget);
  // Rows that cannot bind are left out; `extra` bounds terms whose variable exceeds 1.
  auto emit = [&](std::vector<std::pair<int, double>> terms, double constant_bytes, double extra = 0.0) {
    double worst = constant_bytes + extra;
    std::map<int, double> merged;
    for (const auto& [col, v] : terms) merged[col] += v;
    for (const auto& [col, v] : merged) worst += std::max(v, 0.0);
    if (worst <= cap) return;  // cannot bind
    for (auto& term : terms) term.second *= bytes_scale;
    model.row(terms, 'L', (cap - constant_bytes) * bytes_scale);
  };
  for (std::size_t t = 0; t < n; ++t) emit(mem[t], constant[t]);
  for (launch_id t : moments) {
    // Temporaries share one scratch mapping of whole pages: pages_t * g >= their bytes.
    std::vector<std::pair<int, double>> scratch;
    double most = 0.0;
    for (const auto& [key, col] : w) {
      if (key.second != t) continue;
      const auto bytes = static_cast<double>(round_up(it.buffers[key.first].size, unplanned_rounding));
      scratch.emplace_back(col, bytes * bytes_scale);
      most += bytes;
    }
    std::vector<std::pair<int, double>> terms = mem[t];
    double extra = 0.0;
    if (!scratch.empty()) {
      const double max_pages = std::ceil(most / static_cast<double>(g));
      const int pages = model.integer(max_pages);
      scratch.emplace_back(pages, -static_cast<double>(g) * bytes_scale);
      model.row(scratch, 'L', 0.0);
      terms.emplace_back(pages, static_cast<double>(g));
      extra = (max_pages - 1.0) * static_cast<double>(g);  // emit() counts the pages term once
    }
    emit(std::move(terms), constant[t], extra);
  }
  out.columns = model.columns();
  out.rows = model.rows();

  Cbc_Model* m = model.get();
  Cbc_setLogLevel(m, 0);
  Cbc_setMaximumSeconds(m, options.time_limit_s);
  Cbc_setAllowableGap(m, 1e-9);
  Cbc_setAllowableFractionGap(m, 1e-9);
  Cbc_setParameter(m, "threads", "1");
  Cbc_solve(m);
  if (Cbc_isProvenInfeasible(m) != 0) {
    out.outcome = milp_result::status::infeasible;
    return out;
  }
  if (Cbc_isProvenOptimal(m) == 0 || Cbc_bestSolution(m) == nullptr) {
    out.outcome = milp_result::status::time_limit;
    if (Cbc_bestSolution(m) == nullptr) return out;
  } else {
    out.outcome = milp_result::status::optimal;
  }
  const double* x = Cbc_getColSolution(m);
  out.objective_s = Cbc_getObjValue(m) / cost_scale;
  std::vector<std::uint8_t> dropped(k, 0);
  for (std::size_t c = 0; c < k; ++c) {
    if (x[d[c]] > 0.5) {
      dropped[c] = 1;
      out.dropped.push_back(cs[c].buffer);
    }
  }
  drop_plan_builder builder(cs);
  drop_plan_builder::outcome built = builder.build(dropped);
  if (built.ok) {
    out.best = std::move(built.result);
    out.best.planner = "oracle";
    out.best.budget = budget;
    simulate_into(it, out.best);
  }
  return out;
}

}  // namespace sublinear::policy::oracle
