// Note [Predicted iteration time] is in iteration_time.hpp.
#include "runtime/iteration_time.hpp"

#include <algorithm>

namespace sublinear::runtime {

double host_s_per_launch(const host_cost_sample& s) noexcept {
  if (s.launches == 0) return 0.0;
  return std::max(0.0, s.active_s - s.device_s - s.observation_s) / static_cast<double>(s.launches);
}

iteration_time predict_iteration_time(double device_s, double per_launch, std::size_t traced_launches,
                                      std::size_t replayed_launches) noexcept {
  iteration_time t;
  t.device_s = device_s;
  t.host_s_per_launch = per_launch;
  t.launches = traced_launches + replayed_launches;
  t.host_s = per_launch * static_cast<double>(t.launches);
  t.predicted_s = device_s + t.host_s;
  return t;
}

}  // namespace sublinear::runtime
