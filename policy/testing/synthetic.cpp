#include "policy/testing/synthetic.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace sublinear::policy::synthetic {

namespace {

class iteration_builder {
 public:
  buffer_id persistent(std::size_t bytes) { return add_buffer(bytes, true); }
  buffer_id transient(std::size_t bytes) { return add_buffer(bytes, false); }

  void add_launch(launch_kind kind, const std::string& kernel, double cost, bool replayable,
                  std::vector<buffer_id> touched, std::vector<buffer_id> written) {
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    std::sort(written.begin(), written.end());
    written.erase(std::unique(written.begin(), written.end()), written.end());
    launch l;
    l.kind = kind;
    l.kernel = kernel_id(kernel);
    l.cost_s = cost;
    l.replayable = replayable;
    l.touched = std::move(touched);
    l.written = std::move(written);
    it_.launches.push_back(std::move(l));
  }

  iteration finish(std::size_t granularity) {
    const std::size_t n = it_.launches.size();
    for (launch_id l = 0; l < n; ++l) {
      const launch& ln = it_.launches[l];
      for (buffer_id b : ln.touched) it_.buffers[b].users.push_back(l);
      if (!ln.replayable && ln.kind == launch_kind::kernel) {
        for (buffer_id b : ln.touched) it_.buffers[b].never_evict = true;
      }
    }
    std::vector<buffer_id> order;
    for (buffer_id b = 0; b < it_.buffers.size(); ++b) {
      buffer& buf = it_.buffers[b];
      if (persistent_[b]) {
        buf.alloc_index = none;
        buf.alloc_at = 0;
        buf.free_at = none;
        continue;
      }
      if (buf.users.empty()) throw std::logic_error("synthetic: a transient buffer is never used");
      buf.alloc_at = buf.users.front();
      buf.free_at = buf.users.back() + 1;
      order.push_back(b);
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](buffer_id a, buffer_id b) { return it_.buffers[a].alloc_at < it_.buffers[b].alloc_at; });
    for (std::uint32_t i = 0; i < order.size(); ++i) it_.buffers[order[i]].alloc_index = i;
    it_.granularity = granularity;
    // Live bytes per launch, the peak and the turning point.
    std::vector<std::int64_t> delta(n + 1, 0);
    for (const buffer& b : it_.buffers) {
      const std::size_t hi = b.free_at == none ? n : b.free_at;
      delta[b.alloc_at] += static_cast<std::int64_t>(b.size);
      delta[hi] -= static_cast<std::int64_t>(b.size);
    }
    std::int64_t level = 0;
    std::int64_t best = -1;
    for (std::size_t t = 0; t < n; ++t) {
      level += delta[t];
      if (level > best) {
        best = level;
        it_.turning_point = static_cast<launch_id>(t);
      }
    }
    it_.peak_bytes = static_cast<std::size_t>(std::max<std::int64_t>(best, 0));
    return std::move(it_);
  }

 private:
  buffer_id add_buffer(std::size_t bytes, bool is_persistent) {
    buffer b;
    b.size = bytes;
    it_.buffers.push_back(std::move(b));
    persistent_.push_back(is_persistent);
    return static_cast<buffer_id>(it_.buffers.size() - 1);
  }
  std::uint32_t kernel_id(const std::string& name) {
    const auto [pos, inserted] = kernels_.emplace(name, static_cast<std::uint32_t>(it_.kernel_names.size()));
    if (inserted) it_.kernel_names.push_back(name);
    return pos->second;
  }

  iteration it_;
  std::vector<bool> persistent_;
  std::map<std::string, std::uint32_t> kernels_;
};

std::uint64_t next(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
double uniform(std::uint64_t& s) { return static_cast<double>(next(s) >> 11) * (1.0 / 9007199254740992.0); }

}  // namespace

iteration build(const network& net) {
  iteration_builder ib;
  const std::size_t nl = net.layers.size();
  const std::size_t nt = nl + 1;
  std::vector<buffer_id> buf(nt, none);
  std::vector<std::size_t> tensor_bytes(nt, 0);
  std::vector<std::vector<std::uint32_t>> shared(nt);  // tensor -> tensors its launch also writes
  std::vector<std::uint32_t> consumers(nt, 0);
  tensor_bytes[0] = net.input_bytes;
  buf[0] = ib.transient(net.input_bytes);
  std::vector<buffer_id> weight(nl, none), weight_grad(nl, none), stats(nl, none);
  for (std::size_t k = 0; k < nl; ++k) {
    const layer& L = net.layers[k];
    const std::uint32_t tid = static_cast<std::uint32_t>(k + 1);
    for (std::uint32_t in : L.inputs) {
      if (in >= tid) throw std::invalid_argument("synthetic: layer inputs must be earlier tensors");
      ++consumers[in];
    }
    if (L.in_place) {
      if (L.inputs.empty()) throw std::invalid_argument("synthetic: an in-place layer needs an input");
      buf[tid] = buf[L.inputs.front()];
      tensor_bytes[tid] = tensor_bytes[L.inputs.front()];
    } else {
      buf[tid] = ib.transient(L.output_bytes);
      tensor_bytes[tid] = L.output_bytes;
    }
    if (L.same_launch_as != none) shared[L.same_launch_as].push_back(tid);
    if (L.weight_bytes > 0) {
      weight[k] = ib.persistent(L.weight_bytes);
      weight_grad[k] = ib.persistent(L.weight_bytes);
    }
    if (L.side_output) stats[k] = ib.persistent(std::max<std::size_t>(L.output_bytes / 64, 512));
  }

  // Input.
  ib.add_launch(launch_kind::memcpy, "copy_input", static_cast<double>(net.input_bytes) * 1e-10, !net.input_from_host,
                {buf[0]}, {buf[0]});

  // Forward.
  for (std::size_t k = 0; k < nl; ++k) {
    const layer& L = net.layers[k];
    if (L.same_launch_as != none) continue;
    const std::uint32_t tid = static_cast<std::uint32_t>(k + 1);
    std::vector<buffer_id> touched, written;
    for (std::uint32_t in : L.inputs) touched.push_back(buf[in]);
    touched.push_back(buf[tid]);
    written.push_back(buf[tid]);
    for (std::uint32_t s : shared[tid]) {
      touched.push_back(buf[s]);
      written.push_back(buf[s]);
    }
    if (weight[k] != none) touched.push_back(weight[k]);
    if (stats[k] != none) {
      touched.push_back(stats[k]);
      written.push_back(stats[k]);
    }
    if (L.workspace_bytes > 0) {
      const buffer_id ws = ib.transient(L.workspace_bytes);
      touched.push_back(ws);
      written.push_back(ws);
    }
    ib.add_launch(launch_kind::kernel, L.kernel + "_fwd", L.cost_s, L.replayable, std::move(touched), std::move(written));
  }

  // Loss: reads every tensor nobody consumes, seeds their gradients.
  std::vector<buffer_id> grad(nt, none);
  {
    std::vector<buffer_id> touched, written;
    double cost = 0.0;
    for (std::uint32_t t = 1; t < nt; ++t) {
      if (consumers[t] != 0) continue;
      // An in-place layer's input tensor is consumed by it; its output carries on.
      touched.push_back(buf[t]);
      grad[t] = ib.transient(tensor_bytes[t]);
      touched.push_back(grad[t]);
      written.push_back(grad[t]);
      cost += static_cast<double>(tensor_bytes[t]) * 1e-11;
    }
    ib.add_launch(launch_kind::kernel, "loss", cost, true, std::move(touched), std::move(written));
  }

  // Backward, mirrored.
  for (std::size_t k = nl; k-- > 0;) {
    const layer& L = net.layers[k];
    if (L.same_launch_as != none) continue;
    const std::uint32_t tid = static_cast<std::uint32_t>(k + 1);
    std::vector<buffer_id> touched, written;
    auto read_grad = [&](std::uint32_t t) {
      if (grad[t] != none) touched.push_back(grad[t]);
    };
    read_grad(tid);
    for (std::uint32_t s : shared[tid]) read_grad(s);
    if (L.saves_inputs) {
      for (std::uint32_t in : L.inputs) touched.push_back(buf[in]);
    }
    if (L.saves_output) {
      touched.push_back(buf[tid]);
      for (std::uint32_t s : shared[tid]) touched.push_back(buf[s]);
    }
    if (weight[k] != none) {
      touched.push_back(weight[k]);
      touched.push_back(weight_grad[k]);
      written.push_back(weight_grad[k]);
    }
    for (std::uint32_t in : L.inputs) {
      if (in == 0) continue;  // the input needs no gradient
      if (grad[in] == none) grad[in] = ib.transient(tensor_bytes[in]);
      touched.push_back(grad[in]);
      written.push_back(grad[in]);
    }
    if (L.workspace_bytes > 0) {
      const buffer_id ws = ib.transient(L.workspace_bytes);
      touched.push_back(ws);
      written.push_back(ws);
    }
    if (touched.empty()) continue;
    ib.add_launch(launch_kind::kernel, L.kernel + "_bwd", L.cost_s * net.backward_factor, true, std::move(touched),
                  std::move(written));
  }

  // Optimizer step: pointer arrays in a by-value struct, never replayed.
  {
    std::vector<buffer_id> touched, written;
    for (std::size_t k = 0; k < nl; ++k) {
      if (weight[k] == none) continue;
      touched.push_back(weight[k]);
      touched.push_back(weight_grad[k]);
      written.push_back(weight[k]);
    }
    if (!touched.empty()) ib.add_launch(launch_kind::kernel, "optimizer_step", 1e-4, false, std::move(touched), std::move(written));
  }
  return ib.finish(net.granularity);
}

network chain(const std::vector<std::size_t>& bytes, const std::vector<double>& cost_s, std::size_t granularity) {
  network net;
  net.granularity = granularity;
  net.input_bytes = bytes.empty() ? granularity : bytes.front();
  for (std::size_t k = 0; k < bytes.size(); ++k) {
    layer L;
    L.inputs = {static_cast<std::uint32_t>(k)};
    L.output_bytes = bytes[k];
    L.cost_s = k < cost_s.size() ? cost_s[k] : 1e-3;
    L.kernel = "layer";
    net.layers.push_back(std::move(L));
  }
  return net;
}

network chain(std::size_t layers, std::size_t bytes, std::size_t granularity, double cost_s) {
  return chain(std::vector<std::size_t>(layers, bytes), std::vector<double>(layers, cost_s), granularity);
}

namespace {

std::uint32_t add_layer(network& net, layer L) {
  net.layers.push_back(std::move(L));
  return static_cast<std::uint32_t>(net.layers.size());
}

}  // namespace

network resnet(std::size_t blocks, std::size_t activation_bytes, std::size_t granularity) {
  network net;
  net.granularity = granularity;
  net.input_bytes = activation_bytes;
  const std::size_t a = activation_bytes;
  const std::size_t w = std::max<std::size_t>(a / 64, 4096);
  auto conv = [&](std::uint32_t in) {
    layer L;
    L.inputs = {in};
    L.output_bytes = a;
    L.cost_s = 1.0e-3;
    L.weight_bytes = w;
    L.workspace_bytes = a / 2;
    L.kernel = "conv";
    return add_layer(net, L);
  };
  auto bn = [&](std::uint32_t in) {
    layer L;
    L.inputs = {in};
    L.output_bytes = a;
    L.cost_s = 2.0e-4;
    L.weight_bytes = 4096;
    L.side_output = true;
    L.kernel = "batchnorm";
    return add_layer(net, L);
  };
  auto relu_ = [&](std::uint32_t in) {
    layer L;
    L.inputs = {in};
    L.in_place = true;
    L.cost_s = 1.0e-4;
    L.saves_inputs = false;
    L.saves_output = true;
    L.kernel = "relu";
    return add_layer(net, L);
  };
  std::uint32_t x = relu_(bn(conv(0)));
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::uint32_t y = bn(conv(relu_(bn(conv(x)))));
    layer add;
    add.inputs = {x, y};
    add.output_bytes = a;
    add.cost_s = 1.0e-4;
    add.saves_inputs = false;
    add.kernel = "add";
    x = relu_(add_layer(net, add));
  }
  layer pool;
  pool.inputs = {x};
  pool.output_bytes = std::max<std::size_t>(a / 64, 4096);
  pool.cost_s = 1.0e-4;
  pool.kernel = "pool";
  const std::uint32_t p = add_layer(net, pool);
  layer fc;
  fc.inputs = {p};
  fc.output_bytes = 4096;
  fc.cost_s = 1.0e-4;
  fc.weight_bytes = w;
  fc.kernel = "linear";
  add_layer(net, fc);
  return net;
}

network lstm(std::size_t steps, std::size_t hidden_bytes, std::size_t granularity) {
  network net;
  net.granularity = granularity;
  net.input_bytes = std::max<std::size_t>(steps * hidden_bytes / 8, 4096);
  const std::size_t h = hidden_bytes;
  auto zero = [&]() {
    layer L;
    L.output_bytes = h;
    L.cost_s = 1.0e-5;
    L.saves_inputs = false;
    L.kernel = "zero";
    return add_layer(net, L);
  };
  std::uint32_t hid = zero();
  std::uint32_t cell = zero();
  for (std::size_t t = 0; t < steps; ++t) {
    layer embed;
    embed.inputs = {0};
    embed.output_bytes = h;
    embed.cost_s = 5.0e-5;
    embed.weight_bytes = t == 0 ? h : 0;
    embed.saves_inputs = false;
    embed.kernel = "embedding";
    const std::uint32_t x = add_layer(net, embed);
    layer gates;
    gates.inputs = {x, hid};
    gates.output_bytes = 4 * h;
    gates.cost_s = 8.0e-4;
    gates.weight_bytes = 4 * h;
    gates.workspace_bytes = h;
    gates.kernel = "lstm_gates";
    const std::uint32_t gt = add_layer(net, gates);
    layer ch;
    ch.inputs = {gt, cell};
    ch.output_bytes = h;
    ch.cost_s = 2.0e-4;
    ch.saves_output = true;
    ch.kernel = "lstm_cell";
    const std::uint32_t new_h = add_layer(net, ch);
    layer cc;
    cc.inputs = {gt, cell};
    cc.output_bytes = h;
    cc.same_launch_as = new_h;
    cc.saves_output = true;
    cc.kernel = "lstm_cell";
    const std::uint32_t new_c = add_layer(net, cc);
    hid = new_h;
    cell = new_c;
  }
  layer fc;
  fc.inputs = {hid};
  fc.output_bytes = 4096;
  fc.cost_s = 1.0e-4;
  fc.weight_bytes = h;
  fc.kernel = "linear";
  add_layer(net, fc);
  return net;
}

network random_dag(const dag_spec& spec, std::uint64_t seed) {
  network net;
  net.granularity = spec.granularity;
  std::uint64_t s = seed * 0x2545F4914F6CDD1DULL + 0x1234567ULL;
  auto bytes = [&]() {
    const std::size_t span = spec.max_quanta - spec.min_quanta + 1;
    return spec.quantum * (spec.min_quanta + static_cast<std::size_t>(next(s) % span));
  };
  net.input_bytes = bytes();
  // Tensor state: whether it may still be read (an in-place update retires the old name),
  // how many layers consume it, whether its producer saves it.
  std::vector<std::uint8_t> alive{1};
  std::vector<std::uint32_t> consumers{0};
  std::vector<std::uint8_t> producer_saves_output{0};
  std::vector<std::uint8_t> produced_in_place{0};
  for (std::size_t k = 0; k < spec.layers; ++k) {
    const auto tid = static_cast<std::uint32_t>(k + 1);
    layer L;
    L.cost_s = spec.min_cost_s + (spec.max_cost_s - spec.min_cost_s) * uniform(s);
    const std::uint32_t prev = tid - 1;
    const bool can_in_place = prev != 0 && alive[prev] != 0 && consumers[prev] == 0 &&
                              producer_saves_output[prev] == 0 && produced_in_place[prev] == 0;
    if (can_in_place && uniform(s) < spec.p_in_place) {
      L.inputs = {prev};
      L.in_place = true;
      L.saves_inputs = false;
      L.saves_output = true;
      L.kernel = "inplace";
    } else {
      // The backbone input, or the latest live tensor if the previous one was retired.
      std::uint32_t first = prev;
      while (alive[first] == 0) --first;
      L.inputs = {first};
      const std::size_t extra = uniform(s) < spec.p_third_input ? 2 : (uniform(s) < spec.p_second_input ? 1 : 0);
      for (std::size_t e = 0; e < extra; ++e) {
        const std::uint32_t lo = tid > spec.window ? static_cast<std::uint32_t>(tid - spec.window) : 0;
        const auto pick = static_cast<std::uint32_t>(lo + next(s) % (tid - lo));
        if (alive[pick] == 0 || std::find(L.inputs.begin(), L.inputs.end(), pick) != L.inputs.end()) continue;
        L.inputs.push_back(pick);
      }
      L.output_bytes = bytes();
      L.saves_output = uniform(s) < spec.p_saves_output;
      L.kernel = "op";
      if (uniform(s) < spec.p_workspace) L.workspace_bytes = bytes();
      if (uniform(s) < spec.p_side_output) L.side_output = true;
    }
    if (uniform(s) < spec.p_weight) L.weight_bytes = std::max<std::size_t>(spec.quantum / 16, 512);
    if (uniform(s) < spec.p_non_replayable) {
      L.replayable = false;
      L.kernel = "collective";
    }
    for (std::uint32_t in : L.inputs) ++consumers[in];
    if (L.in_place) alive[L.inputs.front()] = 0;
    alive.push_back(1);
    consumers.push_back(0);
    producer_saves_output.push_back(L.saves_output ? 1 : 0);
    produced_in_place.push_back(L.in_place ? 1 : 0);
    net.layers.push_back(std::move(L));
  }
  return net;
}

}  // namespace sublinear::policy::synthetic
