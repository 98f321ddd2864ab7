// The CUPTI collector's launch listener, adapted to the replay engine.
//
// The tracer describes an intercepted launch, copy or set as a tracer::launch_description
// (Note [Launch listener] in tracer/cupti/cupti_collector.hpp) so that it does not depend on
// the runtime; the engine consumes a runtime::launch_view. This header keeps the two in
// step and forwards ENTER to engine::before_launch and EXIT to engine::after_launch.
// It does not include <cuda.h>.
#pragma once

#include <functional>

#include "runtime/engine.hpp"
#include "tracer/cupti/cupti_collector.hpp"

namespace sublinear::runtime {

// The same operation as the engine sees it (the parameter span is shared, not copied).
[[nodiscard]] launch_view to_launch_view(const tracer::launch_description& op) noexcept;

class engine_listener final : public tracer::launch_listener {
 public:
  // `before_each` runs first at every ENTER (the process runtime delivers pending
  // iteration markers there); it may be empty. `e` must outlive the listener.
  explicit engine_listener(engine& e, std::function<void()> before_each = {})
      : engine_(e), before_each_(std::move(before_each)) {}

  void on_enter(const tracer::launch_description& op) override;
  void on_exit(const tracer::launch_description& op) override;

 private:
  engine& engine_;
  std::function<void()> before_each_;
};

}  // namespace sublinear::runtime
