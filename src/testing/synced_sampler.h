// A sampler after one checked sync, for tests of what a sync leaves behind
// (interop/engine_dump_test.cc, faults/dump_faults_test.cc): two small models,
// the MXFP8 plan they run under, a probe, and the check results read back.
#pragma once
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/digest.h"
#include "model/init.h"
#include "sampler/engine.h"
#include "sync/sync.h"
#include "testing/small_config.h"

namespace mxrl::test {

// Dense: tied, with a square o_proj (2 heads of 32 = hidden 64) so that
// "transposed" applies. MoE: untied, 4 experts, layer 1 dense.
inline ModelConfig config(bool moe) {
  ModelConfig c = small_test_config(moe);
  if (!moe) c.num_attention_heads = 2, c.num_key_value_heads = 1;
  c.validate("test");
  return c;
}

inline ParamTable params(bool moe, uint64_t seed) {
  ParamTable p(config(moe));
  init_params(p, seed);
  return p;
}

// mxfp8; the MoE model's router in FP32 so that router-bf16 applies.
inline PrecisionPlan plan(bool moe) {
  PrecisionPlan p = PrecisionPlan::named("mxfp8");
  if (moe) p.router = {Precision::FP32}, p.name = "mxfp8-r32";
  return p;
}

inline Probe probe() {
  Probe p;
  p.tokens = {{1, 5, 9, 13, 2, 7}};
  p.prompt_len = {2};
  return p;
}

inline std::set<std::string> failed(const std::vector<CheckResult>& r) {
  std::set<std::string> s;
  for (const CheckResult& c : r)
    if (!c.passed) s.insert(c.name);
  return s;
}

inline std::string all_findings(const std::vector<CheckResult>& r) {
  std::vector<std::string> out;
  for (const CheckResult& c : r)
    for (const std::string& f : c.findings) out.push_back(c.name + ": " + f);
  return fmt::format("{}", fmt::join(out, "\n"));
}

inline bool mentions(const std::vector<CheckResult>& r, const std::string& check, const std::string& s) {
  for (const CheckResult& c : r)
    if (c.name == check)
      for (const std::string& f : c.findings)
        if (f.find(s) != std::string::npos) return true;
  return false;
}

// The sampler after version 1 of a sync from perturbed masters (version 0:
// the engine built from masters0), with `hooks`; `previous` is what it held
// before.
struct Synced {
  ParamTable masters1;
  Engine engine;
  std::vector<TensorDigest> previous;
  SyncReport report;
};

inline Synced synced(bool moe, const SyncHooks& hooks, SyncMode mode = SyncMode::Ship) {
  const ParamTable masters0 = params(moe, 1);
  Synced s{params(moe, 2), Engine(std::make_shared<const Model>(masters0, plan(moe)), 0), {}, {}};
  s.previous = model_digests(s.engine.model());
  const Model learner(s.masters1, plan(moe));
  SyncSettings set;
  set.mode = mode;
  set.checks = CheckMode::Warn;
  set.agreement_every = 0;
  set.hooks = hooks;
  s.report = sync_weights(learner, s.masters1, s.engine, 1, set, probe(), {}, 0);
  return s;
}

}  // namespace mxrl::test
