// The catalogue, the plan and the hooks at their seams, without a training
// run (train/faults_test.cc runs every fault through GRPO and the checks): the
// plan parses and refuses bad specs, an empty plan makes no hooks, each seam's
// hook does what its fault says and only from its version on, and the
// transport faults are refused by the staging buffer.
#include <gtest/gtest.h>

#include <set>

#include "faults/hooks.h"
#include "util/error.h"

namespace mxrl {
namespace {

TEST(FaultPlan, ParsesNamesAndStepsAndRefusesBadSpecsWithOneLine) {
  EXPECT_THROW(FaultPlan::parse({"no-such-fault"}), Error);
  EXPECT_THROW(FaultPlan::parse({"drop-tensor@0"}), Error);
  EXPECT_THROW(FaultPlan::parse({"drop-tensor@x"}), Error);
  EXPECT_THROW(FaultPlan::parse({"drop-tensor", "drop-tensor@3"}), Error);
  try {
    FaultPlan::parse({"bogus"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown fault 'bogus' (known: drop-tensor,"), std::string::npos) << e.what();
  }
  const FaultPlan p = FaultPlan::parse({"stale-plan@4", "kv-fp8"});
  EXPECT_FALSE(p.active(Fault::StalePlan, 3));
  EXPECT_TRUE(p.active(Fault::StalePlan, 4));
  EXPECT_TRUE(p.active(Fault::StalePlan, 9));
  EXPECT_TRUE(p.active(Fault::KvFp8, 1));
  EXPECT_FALSE(p.injected(Fault::DropTensor));
  EXPECT_EQ(p.specs(), (std::vector<std::string>{"stale-plan@4", "kv-fp8@1"}));
}

TEST(FaultPlan, TheCatalogueNamesEveryFaultOnceInConditionOrder) {
  std::set<std::string> names;
  int condition = 1;
  for (const FaultInfo& f : fault_table()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_GE(f.condition, condition) << f.name;
    condition = f.condition;
    EXPECT_EQ(fault_info(f.fault).name, std::string(f.name));
    EXPECT_EQ(FaultPlan::parse({f.name}).injections().front().fault, f.fault);
  }
  EXPECT_EQ(names.size(), 24u);
}

TEST(FaultHooks, AnEmptyPlanMakesNoHooks) {
  const FaultSeams none = make_fault_hooks({});
  EXPECT_EQ(none.engine, nullptr);
  EXPECT_EQ(none.sync.learner, nullptr);
  EXPECT_EQ(none.sync.channel, nullptr);
  EXPECT_EQ(none.sync.loader, nullptr);
  const FaultSeams some = make_fault_hooks(FaultPlan::parse({"stale-plan"}));
  EXPECT_NE(some.engine, nullptr);
  EXPECT_NE(some.sync.loader, nullptr);
}

// The engine's faults change the swap from their version on, and only theirs.
TEST(FaultHooks, EngineFaultsChangeTheSwapFromTheirVersionOn) {
  const struct {
    const char* fault;
    bool drain, drop_prefixes, rebind_plan;
    int split_k;
    bool unit_scale, keeps, mixes;
  } cases[] = {
      {"stale-plan@3", true, true, false, 0, false, false, false},
      {"stale-prefix-cache@3", true, false, true, 0, false, true, true},
      {"sync-mid-generation@3", false, true, true, 0, false, false, true},
      {"foreign-kernel@3", true, true, true, 4, false, false, false},
      {"kv-scale-one@3", true, true, true, 0, true, false, false},
      {"drop-tensor@3", true, true, true, 0, false, false, false},  // a loader fault: the engine as it should be
  };
  for (const auto& c : cases) {
    const FaultHooks h(FaultPlan::parse({c.fault}));
    EngineSwap before;
    h.on_swap(2, before);
    EXPECT_TRUE(before.drain && before.drop_prefixes && before.rebind_plan) << c.fault;
    EXPECT_EQ(before.forward.gemm_split_k, 0) << c.fault;
    EXPECT_FALSE(before.forward.kv_unit_scale) << c.fault;
    EngineSwap at;
    h.on_swap(3, at);
    EXPECT_EQ(at.drain, c.drain) << c.fault;
    EXPECT_EQ(at.drop_prefixes, c.drop_prefixes) << c.fault;
    EXPECT_EQ(at.rebind_plan, c.rebind_plan) << c.fault;
    EXPECT_EQ(at.forward.gemm_split_k, c.split_k) << c.fault;
    EXPECT_EQ(at.forward.kv_unit_scale, c.unit_scale) << c.fault;
    EXPECT_EQ(h.keeps_prefixes(), c.keeps) << c.fault;
    EXPECT_EQ(h.mixes_versions(), c.mixes) << c.fault;
  }
}

// The loader takes its faulty path for loader and channel faults of the
// version, and only then; it drains unless sync-mid-generation is active.
TEST(FaultHooks, TheLoaderIsFaultyForLoaderAndChannelFaultsOfTheVersion) {
  for (const FaultInfo& f : fault_table()) {
    const FaultHooks h(FaultPlan::parse({std::string(f.name) + "@2"}));
    const bool loader = f.seam == FaultSeam::Loader || f.seam == FaultSeam::Channel;
    EXPECT_FALSE(h.active(1)) << f.name;
    EXPECT_EQ(h.active(2), loader) << f.name;
    EXPECT_EQ(h.drains(2), f.fault != Fault::SyncMidGeneration) << f.name;
    EXPECT_TRUE(h.drains(1)) << f.name;
  }
}

std::vector<std::byte> bytes_of(size_t n, uint8_t seed) {
  std::vector<std::byte> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
  return b;
}

TEST(FaultHooks, TheTransportFaultsAreRefusedAndOnlyFromTheirVersion) {
  const auto v1 = bytes_of(900, 3), v2 = bytes_of(900, 4);
  for (const char* f : {"chunk-corrupt@2", "chunk-truncate@2", "chunk-stale@2"}) {
    const FaultSeams hooks = make_fault_hooks(FaultPlan::parse({f}));
    ChunkSender sender(128);
    EXPECT_EQ(pass_through_chunks(sender, v1, 1, hooks.sync.channel.get()), v1) << f;  // before: clean
    try {
      pass_through_chunks(sender, v2, 2, hooks.sync.channel.get());
      ADD_FAILURE() << f << " was not refused";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("chunk 4"), std::string::npos) << what;  // count / 2 of 8 chunks
    }
  }
}

}  // namespace
}  // namespace mxrl
