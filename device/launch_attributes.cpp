#include "device/launch_attributes.hpp"

#include <cstring>

namespace sublinear::device {

std::uint32_t launch_attribute::word(std::size_t i) const noexcept {
  std::uint32_t v = 0;
  if (i < launch_attribute_value_bytes / 4) std::memcpy(&v, value.data() + i * 4, 4);
  return v;
}

void launch_attribute::set_word(std::size_t i, std::uint32_t v) noexcept {
  if (i < launch_attribute_value_bytes / 4) std::memcpy(value.data() + i * 4, &v, 4);
}

launch_attribute make_launch_attribute(std::uint32_t id, std::uint32_t x, std::uint32_t y, std::uint32_t z) noexcept {
  launch_attribute a;
  a.id = id;
  a.set_word(0, x);
  a.set_word(1, y);
  a.set_word(2, z);
  return a;
}

std::string launch_attribute_name(std::uint32_t id) {
  namespace id_ = launch_attribute_id;
  switch (id) {
    case id_::ignore: return "ignore";
    case id_::access_policy_window: return "access_policy_window";
    case id_::cooperative: return "cooperative";
    case id_::synchronization_policy: return "synchronization_policy";
    case id_::cluster_dimension: return "cluster_dimension";
    case id_::cluster_scheduling_policy_preference: return "cluster_scheduling_policy_preference";
    case id_::programmatic_stream_serialization: return "programmatic_stream_serialization";
    case id_::programmatic_event: return "programmatic_event";
    case id_::priority: return "priority";
    case id_::mem_sync_domain_map: return "mem_sync_domain_map";
    case id_::mem_sync_domain: return "mem_sync_domain";
    case id_::preferred_cluster_dimension: return "preferred_cluster_dimension";
    case id_::launch_completion_event: return "launch_completion_event";
    case id_::device_updatable_kernel_node: return "device_updatable_kernel_node";
    case id_::preferred_shared_memory_carveout: return "preferred_shared_memory_carveout";
    case id_::nvlink_util_centric_scheduling: return "nvlink_util_centric_scheduling";
    default: return "attribute " + std::to_string(id);
  }
}

replay_verdict verdict_for(std::uint32_t id) noexcept {
  namespace id_ = launch_attribute_id;
  switch (id) {
    case id_::ignore:
    case id_::access_policy_window:
    case id_::cooperative:
    case id_::cluster_dimension:
    case id_::cluster_scheduling_policy_preference:
    case id_::programmatic_stream_serialization:
    case id_::priority:
    case id_::mem_sync_domain_map:
    case id_::mem_sync_domain:
    case id_::preferred_cluster_dimension:
    case id_::preferred_shared_memory_carveout:
    case id_::nvlink_util_centric_scheduling: return {true, ""};
    case id_::programmatic_event:
    case id_::launch_completion_event:
      return {false, "records an event the program waits on; a replay would record it again out of order"};
    case id_::device_updatable_kernel_node:
      return {false, "makes a device-updatable graph node; only a graph launch takes it"};
    case id_::synchronization_policy: return {false, "is a stream attribute, not one a replayed launch can take"};
    default: return {false, "is unknown to this build of sublinear (CUDA 13 headers); it is not guessed at"};
  }
}

const launch_attribute* first_unreplayable(std::span<const launch_attribute> attrs) noexcept {
  for (const launch_attribute& a : attrs)
    if (!verdict_for(a.id).replayable) return &a;
  return nullptr;
}

cluster_shape cluster_of(std::span<const launch_attribute> attrs) noexcept {
  cluster_shape c;
  for (const launch_attribute& a : attrs) {
    if (a.id != launch_attribute_id::cluster_dimension) continue;
    c = {a.word(0), a.word(1), a.word(2)};
  }
  return c;
}

bool cooperative_of(std::span<const launch_attribute> attrs) noexcept {
  bool on = false;
  for (const launch_attribute& a : attrs)
    if (a.id == launch_attribute_id::cooperative) on = a.word(0) != 0;
  return on;
}

}  // namespace sublinear::device
