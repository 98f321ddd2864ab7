// Launch attributes (Note [Launch attributes] in device/launch_attributes.hpp): the verdict
// per id, and the host device's emulation (a kernel sees its cluster shape; a shape that
// does not divide the grid is refused, as cuLaunchKernelEx refuses it).
#include <gtest/gtest.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "device/host/device.hpp"
#include "device/launch_attributes.hpp"
#include "sublinear/error.hpp"

namespace sublinear::device {
namespace {

namespace id = launch_attribute_id;

TEST(LaunchAttributes, ReplayVerdictPerId) {
  for (std::uint32_t ok : {id::access_policy_window, id::cooperative, id::cluster_dimension,
                           id::cluster_scheduling_policy_preference, id::programmatic_stream_serialization,
                           id::priority, id::mem_sync_domain_map, id::mem_sync_domain, id::preferred_cluster_dimension,
                           id::preferred_shared_memory_carveout, id::nvlink_util_centric_scheduling}) {
    EXPECT_TRUE(verdict_for(ok).replayable) << launch_attribute_name(ok);
  }
  for (std::uint32_t bad : {id::programmatic_event, id::launch_completion_event, id::device_updatable_kernel_node,
                            id::synchronization_policy, std::uint32_t{15}, std::uint32_t{99}}) {
    const replay_verdict v = verdict_for(bad);
    EXPECT_FALSE(v.replayable) << launch_attribute_name(bad);
    EXPECT_NE(std::string(v.why), "") << launch_attribute_name(bad);
  }
  EXPECT_EQ(launch_attribute_name(id::cluster_dimension), "cluster_dimension");
  EXPECT_EQ(launch_attribute_name(99), "attribute 99");
}

TEST(LaunchAttributes, FirstUnreplayableAndShapes) {
  const std::vector<launch_attribute> plain{make_launch_attribute(id::cluster_dimension, 2, 1, 1),
                                            make_launch_attribute(id::priority, 3)};
  EXPECT_EQ(first_unreplayable(plain), nullptr);
  EXPECT_EQ(cluster_of(plain), (cluster_shape{2, 1, 1}));
  EXPECT_FALSE(cooperative_of(plain));
  std::vector<launch_attribute> evented = plain;
  evented.push_back(make_launch_attribute(id::cooperative, 1));
  evented.push_back(make_launch_attribute(id::programmatic_event, 0));
  ASSERT_NE(first_unreplayable(evented), nullptr);
  EXPECT_EQ(first_unreplayable(evented)->id, id::programmatic_event);
  EXPECT_TRUE(cooperative_of(evented));
  EXPECT_EQ(cluster_of({}), (cluster_shape{1, 1, 1}));
}

struct seen_params {
  std::uint32_t* out;  // [cluster x, y, z, cooperative]
};
void seen_body(const host::launch_config& cfg, const seen_params& p) {
  const cluster_shape c = cluster_of(cfg.attributes);
  p.out[0] = c.x;
  p.out[1] = c.y;
  p.out[2] = c.z;
  p.out[3] = cooperative_of(cfg.attributes) ? 1 : 0;
}
const host::kernel& seen_kernel() {
  static const host::kernel& k =
      host::register_kernel<seen_params, seen_body>("test.attributes.seen", {SUBLINEAR_PARAM(seen_params, out)});
  return k;
}

// What a hook sees of the launch's attributes.
class attribute_hook : public host::launch_hook {
 public:
  void on_enter(const host::launch_record& rec) override {
    const std::lock_guard lock(mutex);
    entered = rec.config.attributes;
  }
  void on_exit(const host::launch_record&) override {}
  std::mutex mutex;
  std::vector<launch_attribute> entered;
};

TEST(LaunchAttributes, HostKernelSeesItsClusterShapeAndHooksSeeTheList) {
  host::device dev;
  attribute_hook hook;
  dev.add_hook(&hook);
  std::vector<std::uint32_t> out(4, 0);
  seen_params p{out.data()};
  host::launch_config cfg;
  cfg.grid = {8, 2, 1};
  cfg.attributes = {make_launch_attribute(id::cluster_dimension, 4, 2, 1), make_launch_attribute(id::cooperative, 1)};
  dev.launch(seen_kernel(), cfg, nullptr, &p);
  dev.synchronize();
  EXPECT_EQ(out, (std::vector<std::uint32_t>{4, 2, 1, 1}));
  {
    const std::lock_guard lock(hook.mutex);
    EXPECT_EQ(hook.entered, cfg.attributes);
  }
  dev.launch(seen_kernel(), {}, nullptr, &p);  // no attributes: a cluster of one block
  dev.synchronize();
  EXPECT_EQ(out, (std::vector<std::uint32_t>{1, 1, 1, 0}));
  dev.remove_hook(&hook);
}

TEST(LaunchAttributes, HostDeviceRefusesAClusterThatDoesNotDivideTheGrid) {
  host::device dev;
  std::vector<std::uint32_t> out(4, 0);
  seen_params p{out.data()};
  host::launch_config cfg;
  cfg.grid = {6, 1, 1};
  cfg.attributes = {make_launch_attribute(id::cluster_dimension, 4, 1, 1)};
  try {
    dev.launch(seen_kernel(), cfg, nullptr, &p);
    FAIL() << "a 4-block cluster over 6 blocks was accepted";
  } catch (const device_error& e) {
    EXPECT_NE(std::string(e.what()).find("cluster shape 4x1x1 does not divide the grid 6x1x1"), std::string::npos)
        << e.what();
  }
  cfg.attributes = {make_launch_attribute(id::cluster_dimension, 0, 1, 1)};
  EXPECT_THROW(dev.launch(seen_kernel(), cfg, nullptr, &p), device_error);
  dev.synchronize();
  EXPECT_EQ(out, (std::vector<std::uint32_t>{0, 0, 0, 0}));  // nothing ran
}

}  // namespace
}  // namespace sublinear::device
