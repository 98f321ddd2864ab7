// Which buffers a plan's recipes read where they run: in place, or a temporary whose
// scratch the runtime starts from the live buffer's bytes (Note [Offloaded recipe inputs]
// in offload_placement.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "policy/iteration.hpp"
#include "policy/plan.hpp"
#include "policy/recipe.hpp"

namespace sublinear::policy {

// Calls read(x, t) for every buffer x a recipe of p reads in place, t its restore point,
// and for every temporary it reads on entry (reads_on_entry: the runtime starts its
// scratch from the live buffer's bytes). (The search calls it once a round: what each
// recipe rebuilds is marked, not searched.)
template <typename Read>
void for_each_recipe_read(const iteration& it, const plan& p, Read&& read) {
  std::vector<std::uint32_t> rebuilt_by(it.buffers.size(), none);  // the eviction that rebuilds it
  std::vector<std::uint32_t> temporary_of(it.buffers.size(), none);  // reset at its first touch
  for (std::uint32_t k = 0; k < p.evictions.size(); ++k) {
    const eviction& ev = p.evictions[k];
    const auto mark = [&](buffer_id x) {
      if (x < rebuilt_by.size()) rebuilt_by[x] = k;
    };
    mark(ev.target);
    for (buffer_id x : ev.also_regenerates) mark(x);
    for (buffer_id x : ev.temporaries) {
      mark(x);
      if (x < temporary_of.size()) temporary_of[x] = k;
    }
    for (launch_id l : ev.recipe) {
      for (buffer_id x : it.launches[l].touched) {
        if (x < rebuilt_by.size() && rebuilt_by[x] == k) {
          if (temporary_of[x] != k) continue;  // rebuilt, or a temporary touched before
          temporary_of[x] = none;
          if (writes_first(it, l, x)) continue;
        }
        read(x, ev.restore_before);
      }
    }
  }
}

}  // namespace sublinear::policy
