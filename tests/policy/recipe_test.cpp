#include "policy/recipe.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "policy_support.hpp"

namespace sublinear::policy {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A forward pass x -> conv -> y -> bn -> z -> act -> u and its backward, by hand:
//   L0 init x | L1 conv(x, W) -> y, workspace ws, side output q | L2 bn(y, q) -> z, stats S
//   L3 act(z) -> u | L4 loss(u) | L5 bwd(u) | L6 bwd(z) | L7 bwd(y) | L8 bwd(x)
struct scenario_options {
  bool conv_replayable = true;
  bool init_replayable = true;
  bool overwrite_x_after_forward = false;  // L5 also writes x
  bool overwrite_weight_after_forward = false;  // L5 also writes W
};

struct scenario {
  iteration it;
  buffer_id W, S, x, ws, q, y, z, u;
};

scenario make_scenario(const scenario_options& o = {}) {
  test::hand_iteration h;
  scenario s{};
  s.W = h.persistent(1024);
  s.S = h.persistent(512);
  s.x = h.transient(4096, 0, 9);
  s.ws = h.transient(2048, 1, 2);
  s.q = h.transient(512, 1, 9);
  s.y = h.transient(4096, 1, 9);
  s.z = h.transient(4096, 2, 8);
  s.u = h.transient(4096, 3, 7);
  h.launch({}, {s.x}, 1.0, o.init_replayable);
  h.launch({s.x, s.W}, {s.ws, s.y, s.q}, 2.0, o.conv_replayable);
  h.launch({s.y, s.q}, {s.z, s.S}, 3.0);
  h.launch({s.z}, {s.u}, 4.0);
  h.launch({s.u}, {}, 0.5);
  std::vector<buffer_id> l5_writes;
  if (o.overwrite_x_after_forward) l5_writes.push_back(s.x);
  if (o.overwrite_weight_after_forward) l5_writes.push_back(s.W);
  h.launch({s.u}, l5_writes, 0.5);
  h.launch({s.z}, {}, 0.5);
  h.launch({s.y}, {}, 0.5);
  h.launch({s.x, s.q}, {}, 0.5);
  s.it = h.finish(4);
  return s;
}

std::vector<std::uint8_t> evicted_mask(const iteration& it, std::initializer_list<buffer_id> evicted) {
  std::vector<std::uint8_t> m(it.buffers.size(), 0);
  for (buffer_id b : evicted) m[b] = 1;
  return m;
}

TEST(Recipe, ReplaysTheProducerAndReadsUnchangedInputsInPlace) {
  const scenario s = make_scenario();
  const buffer_id t[] = {s.y};
  const recipe_result r = build_recipe(s.it, t, 7);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_THAT(r.launches, ElementsAre(1u));
  EXPECT_THAT(r.regenerated, ElementsAre(s.y));
  EXPECT_THAT(r.inputs, ElementsAre(s.W, s.x));
  EXPECT_DOUBLE_EQ(r.cost_s, 2.0);
}

TEST(Recipe, WorkspaceFreedAfterTheLaunchIsATemporary) {
  const scenario s = make_scenario();
  const buffer_id t[] = {s.y};
  const recipe_result r = build_recipe(s.it, t, 7);
  ASSERT_TRUE(r.ok) << r.error;
  // ws is freed at 2 and q is a side output of the conv: both get scratch pages.
  EXPECT_THAT(r.temporaries, ElementsAre(s.ws, s.q));
}

TEST(Recipe, SideOutputOfAResidentBufferIsATemporaryNotAnInput) {
  const scenario s = make_scenario();
  const buffer_id t[] = {s.z};
  const recipe_result r = build_recipe(s.it, t, 6);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_THAT(r.launches, ElementsAre(2u));
  EXPECT_THAT(r.temporaries, ElementsAre(s.S));  // running statistics: redirected, not updated
  EXPECT_THAT(r.inputs, ElementsAre(s.q, s.y));
}

TEST(Recipe, EvictedInputIsRebuiltInScratchByDefault) {
  const scenario s = make_scenario();
  const buffer_id t[] = {s.z};
  const auto evicted = evicted_mask(s.it, {s.y});
  const recipe_result r = build_recipe(s.it, t, 6, evicted, evicted_inputs::temporary);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_THAT(r.launches, ElementsAre(1u, 2u));
  EXPECT_THAT(r.regenerated, ElementsAre(s.z));
  EXPECT_TRUE(std::find(r.temporaries.begin(), r.temporaries.end(), s.y) != r.temporaries.end());
  EXPECT_DOUBLE_EQ(r.cost_s, 5.0);
}

TEST(Recipe, EvictedInputIsRegeneratedAtItsAddressWhenAsked) {
  const scenario s = make_scenario();
  const buffer_id t[] = {s.z};
  const auto evicted = evicted_mask(s.it, {s.y});
  const recipe_result r = build_recipe(s.it, t, 6, evicted, evicted_inputs::regenerate);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_THAT(r.regenerated, ElementsAre(s.z, s.y));
  EXPECT_TRUE(std::find(r.temporaries.begin(), r.temporaries.end(), s.y) == r.temporaries.end());
}

TEST(Recipe, BufferReadInPlaceButWrittenByAnEarlierRecipeLaunchMovesToScratch) {
  const scenario s = make_scenario();
  const buffer_id t[] = {s.z};
  // With y evicted the conv joins the recipe, and it writes q, which bn reads: q can no
  // longer be read at its own address, so it is rebuilt in scratch by the conv.
  const auto evicted = evicted_mask(s.it, {s.y});
  const recipe_result r = build_recipe(s.it, t, 6, evicted, evicted_inputs::temporary);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(std::find(r.temporaries.begin(), r.temporaries.end(), s.q) != r.temporaries.end());
  EXPECT_TRUE(std::find(r.inputs.begin(), r.inputs.end(), s.q) == r.inputs.end());
}

TEST(Recipe, SeveralTargetsShareOneRecipe) {
  const scenario s = make_scenario();
  const buffer_id t[] = {s.z, s.y};
  const recipe_result r = build_recipe(s.it, t, 6);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_THAT(r.launches, ElementsAre(1u, 2u));
  EXPECT_THAT(r.regenerated, ElementsAre(s.z, s.y));
}

TEST(Recipe, InputOverwrittenAfterTheReaderIsRebuiltFromItsWriters) {
  scenario_options o;
  o.overwrite_x_after_forward = true;
  const scenario s = make_scenario(o);
  const buffer_id t[] = {s.y};
  const recipe_result r = build_recipe(s.it, t, 7);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_THAT(r.launches, ElementsAre(0u, 1u));  // x as it was before L5: replay L0 into scratch
  EXPECT_TRUE(std::find(r.temporaries.begin(), r.temporaries.end(), s.x) != r.temporaries.end());
}

TEST(Recipe, NonReplayableProducerIsRefused) {
  scenario_options o;
  o.conv_replayable = false;
  const scenario s = make_scenario(o);
  const buffer_id t[] = {s.y};
  const recipe_result r = build_recipe(s.it, t, 7);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("launch 1"));
  EXPECT_THAT(r.error, HasSubstr("not replayable"));
  EXPECT_THAT(r.launches, IsEmpty());
}

TEST(Recipe, NonReplayableLaunchReachedThroughAnEvictedInputIsRefused) {
  scenario_options o;
  o.conv_replayable = false;
  const scenario s = make_scenario(o);
  const buffer_id t[] = {s.z};
  const recipe_result alone = build_recipe(s.it, t, 6);
  EXPECT_TRUE(alone.ok) << alone.error;  // y resident: only bn is replayed
  const auto evicted = evicted_mask(s.it, {s.y});
  const recipe_result r = build_recipe(s.it, t, 6, evicted, evicted_inputs::temporary);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("launch 1"));
}

TEST(Recipe, InputFromBeforeTheIterationThatChangedIsRefused) {
  scenario_options o;
  o.overwrite_weight_after_forward = true;
  const scenario s = make_scenario(o);
  const buffer_id t[] = {s.y};
  const recipe_result r = build_recipe(s.it, t, 7);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("from before the iteration"));
}

TEST(Recipe, RebuildingAnInputWithANonReplayableWriterIsRefused) {
  scenario_options o;
  o.overwrite_x_after_forward = true;
  o.init_replayable = false;  // x came from the host
  const scenario s = make_scenario(o);
  const buffer_id t[] = {s.y};
  const recipe_result r = build_recipe(s.it, t, 7);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("launch 0"));
}

TEST(Recipe, TargetThatIsNotAllocatedAtTheRestorePointIsRefused) {
  const scenario s = make_scenario();
  const buffer_id t[] = {s.u};
  const recipe_result r = build_recipe(s.it, t, 8);  // u is freed before launch 7
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("not allocated"));
}

TEST(Recipe, BuilderGivesTheSameAnswerWhenReused) {
  const scenario s = make_scenario();
  const dataflow df(s.it);
  recipe_builder builder(df);
  const auto evicted = evicted_mask(s.it, {s.y});
  const buffer_id t[] = {s.z};
  const recipe_result first = builder.build(t, 6, evicted, evicted_inputs::temporary);
  const buffer_id other[] = {s.y};
  (void)builder.build(other, 7, {}, evicted_inputs::temporary);
  const recipe_result again = builder.build(t, 6, evicted, evicted_inputs::temporary);
  EXPECT_EQ(first.launches, again.launches);
  EXPECT_EQ(first.temporaries, again.temporaries);
  EXPECT_EQ(first.inputs, again.inputs);
}

// A launch that writes a new output and updates an earlier buffer in place (an
// accumulator, or a bias copied into an output before a GEMM adds into it):
//   L0 init(W) -> x | L1 k(W, x) -> t, x updated in place | L2 loss(t) | L3 bwd(t) | L4 bwd(x)
struct in_place_scenario {
  iteration it;
  buffer_id W, x, t;
};
in_place_scenario make_in_place_scenario() {
  test::hand_iteration h;
  in_place_scenario s{};
  s.W = h.persistent(1024);
  s.x = h.transient(4096, 0, 5);
  s.t = h.transient(4096, 1, 5);
  h.launch({s.W}, {s.x});
  h.launch({s.W, s.x}, {s.t, s.x}, 2.0);
  h.launch({s.t}, {});
  h.launch({s.t}, {});
  h.launch({s.x}, {});
  s.it = h.finish(2);
  return s;
}

TEST(Recipe, AResidentBufferUpdatedInPlaceByTheProducerIsASideOutput) {
  const in_place_scenario s = make_in_place_scenario();
  const buffer_id t[] = {s.t};
  const recipe_result r = build_recipe(s.it, t, 3);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_THAT(r.launches, ElementsAre(1u));
  EXPECT_THAT(r.temporaries, ElementsAre(s.x));  // its scratch starts from the resident bytes
}

TEST(Recipe, AnEvictedBufferUpdatedInPlaceByTheProducerIsRefused) {
  const in_place_scenario s = make_in_place_scenario();
  const buffer_id t[] = {s.t};
  // x is evicted at the restore point: L1 would update bytes that are not there.
  const auto evicted = evicted_mask(s.it, {s.x});
  const recipe_result r = build_recipe(s.it, t, 3, evicted, evicted_inputs::temporary);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("launch 1"));
  EXPECT_THAT(r.error, HasSubstr("updates buffer " + std::to_string(s.x) + " in place"));
  EXPECT_THAT(r.launches, IsEmpty());
}

// x is persistent and updated in place by the producer L1 (as a workspace the trace
// takes for written would be): L0 W -> a | L1 f(a, x) -> t, x | L2 g(x) -> x | L3 bwd(t).
// Replayed before L3, L1 would start x's scratch from bytes L2 has changed since; the
// runtime refuses that recipe (the GPT-2 blocks' "would read buffer 22 after it
// changed"), so the builder must.
TEST(Recipe, ASideOutputWrittenAgainOutsideTheRecipeIsRefused) {
  for (bool written_again : {false, true}) {
    SCOPED_TRACE(written_again ? "written again by L2" : "not written again");
    test::hand_iteration h;
    const buffer_id W = h.persistent(1024);
    const buffer_id x = h.persistent(1024);
    const buffer_id a = h.transient(4096, 0, 4);
    const buffer_id t = h.transient(4096, 1, 4);
    h.launch({W}, {a});
    h.launch({a, x}, {t, x});
    if (written_again) {
      h.launch({x}, {x});
    } else {
      h.launch({x}, {});
    }
    h.launch({t}, {});
    const iteration it = h.finish(2);
    const buffer_id target[] = {t};
    const recipe_result r = build_recipe(it, target, 3);
    if (written_again) {
      EXPECT_FALSE(r.ok);
      EXPECT_THAT(r.error, HasSubstr("updates buffer " + std::to_string(x) + " in place"));
      EXPECT_THAT(r.error, HasSubstr("outside the recipe writes it again"));
    } else {
      ASSERT_TRUE(r.ok) << r.error;
      EXPECT_THAT(r.launches, ElementsAre(1u));
      EXPECT_THAT(r.temporaries, ElementsAre(x));
    }
  }
}

// cuDNN's weight-gradient convolution on an H200: two transposes write the
// layer's input and output gradient into a workspace w, the wgrad kernel reads them there
// and writes the gradient t and a counter inside w, and w is freed before the optimizer
// reads t: L0 -> w | L1 f(w) -> t, w | free w | L2 | L3 opt(t). Replayed before L3, L1's
// scratch for w would hold none of L0's bytes (validation found the gradients different);
// the recipe is refused. A workspace L1 is the first to use needs no bytes (control).
TEST(Recipe, ASideOutputFreedBeforeTheRestorePointWithAnEarlierWritersBytesIsRefused) {
  for (bool written_before : {true, false}) {
    SCOPED_TRACE(written_before ? "L0 writes the workspace" : "L1 is its first user");
    test::hand_iteration h;
    const buffer_id a = h.persistent(1024);
    const buffer_id w = h.transient(4096, 0, 2);
    const buffer_id t = h.transient(4096, 1, 4);
    if (written_before) {
      h.launch({a}, {w});
    } else {
      h.launch({a}, {});
    }
    h.launch({w}, {t, w});
    h.launch({a}, {});
    h.launch({t}, {});
    const iteration it = h.finish(2);
    const buffer_id target[] = {t};
    const recipe_result r = build_recipe(it, target, 3);
    if (written_before) {
      EXPECT_FALSE(r.ok);
      EXPECT_THAT(r.error, HasSubstr("updates buffer " + std::to_string(w) + " in place"));
      EXPECT_THAT(r.error, HasSubstr("freed before the restore point"));
    } else {
      ASSERT_TRUE(r.ok) << r.error;
      EXPECT_THAT(r.launches, ElementsAre(1u));
      EXPECT_THAT(r.temporaries, ElementsAre(w));
    }
  }
}

TEST(Recipe, AnEvictedSideOutputThatIsTheLaunchsFreshOutputNeedsNoRebuilding) {
  const scenario s = make_scenario();
  // q is the conv's fresh side output: its old bytes are never read, evicted or not.
  const buffer_id t[] = {s.y};
  const auto evicted = evicted_mask(s.it, {s.q});
  const recipe_result r = build_recipe(s.it, t, 7, evicted, evicted_inputs::temporary);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_THAT(r.launches, ElementsAre(1u));
}

// Note [Unknown producers]: y is read by L0 and nothing recorded writes it before (the
// tracer missed the write): L0 in | L1 f(y) -> z | L2 bwd(z) | L3 bwd(y)
TEST(Recipe, ABufferNoLaunchIsSeenWritingIsNeverRebuilt) {
  test::hand_iteration h;
  const buffer_id y = h.transient(4096, 0, 4);
  const buffer_id z = h.transient(4096, 1, 4);
  h.launch({y}, {});
  h.launch({y}, {z});
  h.launch({z}, {});
  h.launch({y}, {});
  const iteration it = h.finish(1);
  const buffer_id just_z[] = {z};
  const recipe_result in_place = build_recipe(it, just_z, 2);
  ASSERT_TRUE(in_place.ok) << in_place.error;  // y resident and unchanged: read where it is
  EXPECT_THAT(in_place.inputs, ElementsAre(y));
  const auto evicted = evicted_mask(it, {y});
  const recipe_result through_scratch = build_recipe(it, just_z, 2, evicted, evicted_inputs::temporary);
  EXPECT_FALSE(through_scratch.ok);
  EXPECT_THAT(through_scratch.error, HasSubstr("no launch is seen writing it"));
  EXPECT_THAT(through_scratch.error, HasSubstr("launch 0"));
  const buffer_id just_y[] = {y};
  EXPECT_FALSE(build_recipe(it, just_y, 3).ok);
}

TEST(Dataflow, ListsWritersInOrderAndAnswersLiveness) {
  scenario_options o;
  o.overwrite_x_after_forward = true;
  const scenario s = make_scenario(o);
  const dataflow df(s.it);
  EXPECT_THAT(std::vector<launch_id>(df.writers(s.x).begin(), df.writers(s.x).end()), ElementsAre(0u, 5u));
  EXPECT_TRUE(df.written_in(s.x, 1, 6));
  EXPECT_FALSE(df.written_in(s.x, 1, 5));
  EXPECT_TRUE(df.allocated_at(s.ws, 1));
  EXPECT_FALSE(df.allocated_at(s.ws, 2));
  EXPECT_EQ(df.next_use_after(s.y, 2), 7u);
  EXPECT_FALSE(df.used_between(s.y, 2, 7));
}

}  // namespace
}  // namespace sublinear::policy
