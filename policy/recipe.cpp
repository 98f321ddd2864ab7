#include "policy/recipe.hpp"

#include <algorithm>

namespace sublinear::policy {

namespace {

std::string launch_label(const iteration& it, launch_id l) {
  const launch& ln = it.launches[l];
  std::string s = "launch " + std::to_string(l);
  if (ln.kernel < it.kernel_names.size()) s += " (" + it.kernel_names[ln.kernel] + ")";
  return s;
}

}  // namespace

// ---- dataflow ---------------------------------------------------------------------------

dataflow::dataflow(const iteration& it) : it_(&it) {
  const std::size_t nb = it.buffers.size();
  offsets_.assign(nb + 1, 0);
  for (const launch& l : it.launches) {
    for (buffer_id b : l.written) {
      if (b < nb) ++offsets_[b + 1];
    }
  }
  for (std::size_t b = 0; b < nb; ++b) offsets_[b + 1] += offsets_[b];
  writers_.resize(offsets_[nb]);
  std::vector<std::uint32_t> fill(offsets_.begin(), offsets_.end() - 1);
  // Launches are visited in order, so each buffer's writer list comes out ascending.
  for (launch_id l = 0; l < it.launches.size(); ++l) {
    for (buffer_id b : it.launches[l].written) {
      if (b < nb) writers_[fill[b]++] = l;
    }
  }
}

std::span<const launch_id> dataflow::writers(buffer_id b) const noexcept {
  return {writers_.data() + offsets_[b], writers_.data() + offsets_[b + 1]};
}

std::span<const launch_id> dataflow::writers_in(buffer_id b, launch_id lo, launch_id hi) const noexcept {
  const auto all = writers(b);
  if (lo >= hi) return {};
  const auto first = std::lower_bound(all.begin(), all.end(), lo);
  const auto last = std::lower_bound(first, all.end(), hi);
  return {first, last};
}

bool dataflow::writes(launch_id l, buffer_id b) const noexcept {
  const auto& w = it_->launches[l].written;
  return std::binary_search(w.begin(), w.end(), b);
}

bool writes_first(const iteration& it, launch_id l, buffer_id b) {
  const buffer& buf = it.buffers[b];
  const auto& w = it.launches[l].written;
  return buf.alloc_index != none && !buf.users.empty() && buf.users.front() == l &&
         std::binary_search(w.begin(), w.end(), b);
}

bool reads_on_entry(const iteration& it, std::span<const launch_id> recipe, buffer_id b) {
  for (launch_id l : recipe) {
    const auto& t = it.launches[l].touched;
    if (std::binary_search(t.begin(), t.end(), b)) return !writes_first(it, l, b);
  }
  return false;
}

bool dataflow::allocated_at(buffer_id b, launch_id r) const noexcept {
  const buffer& buf = it_->buffers[b];
  return buf.alloc_at <= r && (buf.free_at == none || r < buf.free_at);
}

bool dataflow::used_between(buffer_id b, launch_id lo, launch_id hi) const noexcept {
  const auto& u = it_->buffers[b].users;
  const auto it = std::upper_bound(u.begin(), u.end(), lo);
  return it != u.end() && *it < hi;
}

launch_id dataflow::next_use_after(buffer_id b, launch_id l) const noexcept {
  const auto& u = it_->buffers[b].users;
  const auto it = std::upper_bound(u.begin(), u.end(), l);
  return it == u.end() ? none : *it;
}

// ---- recipe_builder ---------------------------------------------------------------------

recipe_builder::recipe_builder(const dataflow& df)
    : df_(&df),
      roles_(df.buffer_count(), role::unset),
      role_epoch_(df.buffer_count(), 0),
      need_epoch_(df.buffer_count(), 0),
      forced_epoch_(df.buffer_count(), 0),
      queued_epoch_(df.launch_count(), 0) {}

void recipe_builder::require(buffer_id b, launch_id before) {
  if (need_epoch_[b] == epoch_) return;  // already needed at a later point: same writers and more
  need_epoch_[b] = epoch_;
  const buffer& buf = df_->graph().buffers[b];
  if (buf.alloc_index == none) {
    if (failure_.empty()) {
      failure_ = "buffer " + std::to_string(b) +
                 " would have to be rebuilt, but it holds data from before the iteration";
    }
    return;
  }
  // Note [Unknown producers] (tracer/analysis.cpp): bytes no recorded launch produced
  // cannot be rebuilt; a recipe that reads them through scratch would read garbage.
  if (!buf.users.empty() && !buf.unwritten_at_first_use && !df_->writes(buf.users.front(), b)) {
    if (failure_.empty()) {
      failure_ = "buffer " + std::to_string(b) + " would have to be rebuilt, but no launch is seen writing it before " +
                 launch_label(df_->graph(), buf.users.front()) + " reads it (a write the tracer did not observe)";
    }
    return;
  }
  for (launch_id w : df_->writers_in(b, buf.alloc_at, before)) {
    if (queued_epoch_[w] == epoch_) continue;
    queued_epoch_[w] = epoch_;
    heap_.push_back(w);
    std::push_heap(heap_.begin(), heap_.end());
  }
}

recipe_result recipe_builder::build(std::span<const buffer_id> targets, launch_id restore_before,
                                    std::span<const std::uint8_t> evicted, evicted_inputs mode,
                                    std::span<const launch_id> regenerate_from) {
  const iteration& it = df_->graph();
  const launch_id r = restore_before;
  recipe_result out;
  if (r >= it.launches.size()) {
    out.error = "restore point " + std::to_string(r) + " is not a launch of the iteration";
    return out;
  }
  if (!regenerate_from.empty() && regenerate_from.size() != it.buffers.size()) {
    out.error = "the regeneration horizons have " + std::to_string(regenerate_from.size()) + " entries for " +
                std::to_string(it.buffers.size()) + " buffers";
    return out;
  }
  if (!evicted.empty() && evicted.size() != it.buffers.size()) {
    out.error = "the evicted set has " + std::to_string(evicted.size()) + " entries for " +
                std::to_string(it.buffers.size()) + " buffers";
    return out;
  }
  for (buffer_id t : targets) {
    if (t >= it.buffers.size()) {
      out.error = "target buffer " + std::to_string(t) + " does not exist";
      return out;
    }
    if (it.buffers[t].alloc_index == none) {
      out.error = "target buffer " + std::to_string(t) + " is allocated before the iteration";
      return out;
    }
    if (!df_->allocated_at(t, r)) {
      out.error = "target buffer " + std::to_string(t) + " is not allocated before launch " + std::to_string(r);
      return out;
    }
  }

  ++call_;
  const auto is_evicted = [&](buffer_id b) { return !evicted.empty() && evicted[b] != 0; };
  const auto held_back = [&](buffer_id b) {
    return !regenerate_from.empty() && regenerate_from[b] != none && regenerate_from[b] > r;
  };
  std::vector<buffer_id> seen;     // every buffer given a role in this sweep
  std::vector<buffer_id> pulled;   // evicted inputs regenerated at their own address
  for (std::size_t attempt = 0; attempt <= it.buffers.size(); ++attempt) {
    ++epoch_;
    failure_.clear();
    heap_.clear();
    seen.clear();
    pulled.clear();
    out.launches.clear();
    bool conflict = false;
    // A side output that launch l writes and also reads (it updates it in place) starts
    // its scratch from the bytes it has at the restore point (Note [Replay recipes] in
    // runtime/engine_regenerate.cpp). Those are the bytes l read only if the buffer is resident at r and
    // every later write to it before r is the recipe's own; the runtime checks this by
    // version. Otherwise the recipe is refused, and why is returned. (Rebuilding such a
    // buffer from its writers instead would, on traces without observed writes, where
    // every touched block counts as written, grow recipes to whole chains and make
    // planning several times slower.) Launches are taken latest first, so the recipe's
    // launches after l are all known when l is.
    const auto side_output_lacks_its_bytes = [&](buffer_id x, launch_id l) -> const char* {
      const buffer& bx = it.buffers[x];
      if (bx.alloc_index != none && bx.users.front() == l) return nullptr;  // l's fresh output
      if (!df_->allocated_at(x, r)) {
        // Its scratch starts with no bytes of its own; right only if none were written
        // into it before l (a workspace l alone uses).
        if (bx.alloc_index != none && df_->written_in(x, bx.alloc_at, l)) {
          return "that buffer is freed before the restore point, with bytes an earlier launch wrote into it";
        }
        return nullptr;
      }
      if (is_evicted(x)) return "that buffer is evicted at the restore point";
      for (launch_id w : df_->writers_in(x, l + 1, r))
        if (queued_epoch_[w] != epoch_) return "a launch outside the recipe writes it again before the restore point";
      return nullptr;
    };
    const auto refuse_side_output = [&](buffer_id x, launch_id l) {
      const char* why = side_output_lacks_its_bytes(x, l);
      if (why != nullptr && failure_.empty()) {
        failure_ = launch_label(it, l) + " updates buffer " + std::to_string(x) + " in place, and " + why;
      }
      return why != nullptr;
    };
    for (buffer_id t : targets) {
      if (role_of(t) == role::unset) seen.push_back(t);
      set_role(t, role::regenerated);
      require(t, r);
    }
    while (!heap_.empty() && failure_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end());
      const launch_id l = heap_.back();
      heap_.pop_back();
      out.launches.push_back(l);
      const launch& ln = it.launches[l];
      if (!ln.replayable) {
        failure_ = launch_label(it, l) + " is not replayable";
        break;
      }
      // touched and written are both ascending: walk them together.
      auto w_it = ln.written.begin();
      for (buffer_id x : ln.touched) {
        while (w_it != ln.written.end() && *w_it < x) ++w_it;
        const bool writes = w_it != ln.written.end() && *w_it == x;
        switch (role_of(x)) {
          case role::regenerated:
          case role::scratch:
            // Its value flows through the recipe; every writer before the latest reader
            // is already queued.
            break;
          case role::side:
            if (!writes) {
              set_role(x, role::scratch);
              require(x, l);
            } else {
              refuse_side_output(x, l);
            }
            break;
          case role::in_place:
            if (writes || df_->written_in(x, l, r)) {
              forced_epoch_[x] = call_;
              conflict = true;
            }
            break;
          case role::unset: {
            seen.push_back(x);
            const bool resident = df_->allocated_at(x, r) && !is_evicted(x);
            if (writes && refuse_side_output(x, l)) break;
            if (writes) {
              set_role(x, role::side);
            } else if (resident && !forced_scratch(x) && !df_->written_in(x, l, r)) {
              set_role(x, role::in_place);
            } else if (mode == evicted_inputs::regenerate && is_evicted(x) && !held_back(x) && df_->allocated_at(x, r) &&
                       !df_->written_in(x, l, r) && it.buffers[x].alloc_index != none && !forced_scratch(x)) {
              set_role(x, role::regenerated);
              pulled.push_back(x);
              require(x, r);
            } else {
              set_role(x, role::scratch);
              require(x, l);
            }
            break;
          }
        }
      }
    }
    if (!failure_.empty()) break;
    if (!conflict) break;
  }
  if (!failure_.empty()) {
    out.error = failure_;
    out.launches.clear();
    return out;
  }

  std::sort(out.launches.begin(), out.launches.end());
  out.regenerated.assign(targets.begin(), targets.end());
  std::sort(pulled.begin(), pulled.end());
  out.regenerated.insert(out.regenerated.end(), pulled.begin(), pulled.end());
  for (buffer_id b : seen) {
    const role rl = role_of(b);
    if (rl == role::scratch || rl == role::side) out.temporaries.push_back(b);
    if (rl == role::in_place) out.inputs.push_back(b);
  }
  std::sort(out.temporaries.begin(), out.temporaries.end());
  std::sort(out.inputs.begin(), out.inputs.end());
  for (launch_id l : out.launches) out.cost_s += it.launches[l].cost_s;
  out.ok = true;
  return out;
}

recipe_result build_recipe(const iteration& it, std::span<const buffer_id> targets, launch_id restore_before,
                           std::span<const std::uint8_t> evicted, evicted_inputs mode) {
  const dataflow df(it);
  recipe_builder builder(df);
  return builder.build(targets, restore_before, evicted, mode);
}

}  // namespace sublinear::policy
