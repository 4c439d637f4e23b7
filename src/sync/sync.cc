#include "sync/sync.h"

#include <chrono>

#include <fmt/format.h>

#include "util/clock.h"
#include "util/error.h"

namespace mxrl {

WeightShipment LoaderHooks::requantize(const ParamTable& params, const PrecisionPlan& plan, uint64_t,
                                       const Exec& exec) const {
  return Model(params, plan, exec).ship();
}

bool SyncReport::passed() const {
  if (!applied) return false;
  for (const CheckResult& c : checks)
    if (c.ran && !c.passed) return false;
  return true;
}

std::vector<std::string> SyncReport::findings() const {
  std::vector<std::string> out;
  if (!error.empty()) out.push_back("sync: " + error);
  for (const CheckResult& c : checks)
    for (const std::string& f : c.findings) out.push_back(c.name + ": " + f);
  return out;
}

nlohmann::json SyncReport::to_json() const {
  nlohmann::json j = {{"version", version},       {"applied", applied},       {"bytes", bytes},
                      {"build_s", build_seconds}, {"apply_s", apply_seconds}, {"checks_s", check_seconds}};
  if (!error.empty()) j["error"] = error;
  nlohmann::json cs = nlohmann::json::object();
  for (const CheckResult& c : checks) {
    nlohmann::json cj = {{"passed", c.passed}, {"seconds", c.seconds}, {"findings", c.findings}};
    if (!c.measured.empty()) cj["measured"] = c.measured;
    cs[c.name] = std::move(cj);
  }
  j["checks"] = std::move(cs);
  return j;
}

bool same_numerics(const Model& learner, const PrecisionPlan& sampler_plan, const Exec& exec) {
  if (learner.plan().fp8_kv_cache != sampler_plan.fp8_kv_cache) return false;
  if (learner.plan().bf16_embeddings != sampler_plan.bf16_embeddings) return false;
  bool same = true;
  const ParamTable layout(learner.config(), /*allocate=*/false);
  learner.for_each_tensor([&](const ModelTensor& t) {
    if (!t.linear) return;
    const ParamInfo* p = layout.find(t.linear->name);
    const LinearPrecision want = p && p->role == ParamRole::Linear ? sampler_plan.for_param(*p) : sampler_plan.lm_head;
    if (!(want == t.linear->prec)) same = false;
  });
  return same;
}

void apply_bundle(Engine& engine, const Bundle& b, const LoaderHooks* hooks, const Exec& exec) {
  const uint64_t v = b.version;
  // The drain: a sampler with samples in flight must finish them first (the
  // sync-mid-generation fault swaps anyway).
  if (!engine.idle() && (!hooks || hooks->drains(v)))
    fail("sync: the sampler has samples in flight; drain before applying version {}", v);
  const Model& live = engine.model();
  const ModelConfig& cfg = live.config();
  if (b.config != cfg.to_json()) fail("sync: version {} is for another model config", v);
  PrecisionPlan plan = live.plan();
  if (!hooks || !hooks->active(v)) {  // the loader as it should be: build the whole version, then swap
    if (b.mode == SyncMode::Ship)
      engine.stage(bundle_to_shipment(b, cfg), v);
    else
      engine.stage(bundle_to_params(b, cfg), plan, v);
    if (!engine.swap_now()) fail("sync: version {} staged but not swapped in", v);
    return;
  }
  // The faulty loader: each step is a seam of the hooks.
  WeightShipment s = b.mode == SyncMode::Ship ? bundle_to_shipment(b, cfg)
                                              : hooks->requantize(bundle_to_params(b, cfg), plan, v, exec);
  hooks->edit_shipment(s, plan, live, v, exec);
  hooks->write_in_place(engine, b, s, plan, v, exec);
  Model next = Model::from_shipment(cfg, plan, s, exec);
  hooks->edit_model(next, live, v, exec);
  engine.stage(std::make_shared<const Model>(std::move(next)), v);
  if (!engine.swap_now()) fail("sync: version {} staged but not swapped in", v);
}

std::vector<std::byte> build_bundle_bytes(const Model& learner, const ParamTable& masters, const PrecisionPlan& plan,
                                          uint64_t version, const SyncSettings& s, const Exec& exec) {
  Bundle bundle = s.mode == SyncMode::Ship ? make_ship_bundle(learner, masters, plan, version, exec)
                                           : make_requantize_bundle(masters, learner.plan(), version);
  if (s.hooks.learner) s.hooks.learner->edit_bundle(bundle, learner, masters, exec);
  return serialize(bundle);
}

bool agreement_due(const SyncSettings& s, uint64_t version) {
  return s.agreement_every > 0 && version % static_cast<uint64_t>(s.agreement_every) == 0;
}

CheckReference learner_reference(const Model& learner, const ParamTable& masters, const PrecisionPlan& plan,
                                 uint64_t version, const SyncSettings& s, const Probe& probe, const Exec& exec) {
  CheckReference ref;
  ref.manifest = expected_manifest(learner, masters, plan, exec);
  ref.agreement = agreement_due(s, version);
  if (ref.agreement) ref.probe_logits = probe_reference(learner, probe, exec);
  return ref;
}

SyncReport apply_and_check(Engine& engine, uint64_t version, const std::function<std::vector<std::byte>()>& receive,
                           const std::function<CheckReference()>& reference, const SyncSettings& s, const Probe& probe,
                           const std::vector<GeneratedSample>& rollout, uint64_t rollout_version, const Exec& exec) {
  SyncReport r;
  r.version = version;
  Expectation e;
  e.version = version;
  e.previous_manifest = model_digests(engine.model());
  auto t0 = Clock::now();
  try {
    const std::vector<std::byte> bytes = receive();
    r.bytes = static_cast<int64_t>(bytes.size());
    apply_bundle(engine, parse_bundle(bytes, fmt::format("bundle v{}", version)), s.hooks.loader.get(), exec);
    r.applied = true;
  } catch (const Error& err) {
    r.error = err.what();
    e.sync_failed = true;
  }
  r.apply_seconds = seconds_since(t0);
  if (s.checks == CheckMode::Off) return r;
  t0 = Clock::now();
  const CheckReference ref = reference();
  e.manifest = ref.manifest;
  const std::vector<TensorDigest> live = model_digests(engine.model());
  if (!e.sync_failed) r.checks = check_manifests(e.manifest, live, e.previous_manifest, ref.transposed);
  r.checks.push_back(check_freshness(engine, exec));
  r.checks.push_back(check_atomicity(engine, e, rollout, rollout_version, live));
  if (!e.sync_failed && ref.agreement) r.checks.push_back(check_agreement(ref.probe_logits, engine, probe, s.bound));
  r.check_seconds = seconds_since(t0);
  return r;
}

SyncReport sync_weights(const Model& learner, const ParamTable& masters, Engine& engine, uint64_t version,
                        const SyncSettings& s, const Probe& probe, const std::vector<GeneratedSample>& rollout,
                        uint64_t rollout_version, const Channel& channel, const Exec& exec) {
  // What the sampler is meant to run (a copy: the swap frees the old model).
  const PrecisionPlan plan = s.sampler_plan ? *s.sampler_plan : engine.model().plan();
  const auto t0 = Clock::now();
  std::vector<std::byte> bytes = build_bundle_bytes(learner, masters, plan, version, s, exec);
  const double build = seconds_since(t0);
  std::shared_ptr<ChunkSender> sender = s.sender ? s.sender : std::make_shared<ChunkSender>();
  auto receive = [&] {
    std::vector<std::byte> got = pass_through_chunks(*sender, bytes, version, s.hooks.channel.get());
    return channel ? channel(std::move(got)) : got;
  };
  auto reference = [&] {
    CheckReference ref = learner_reference(learner, masters, plan, version, s, probe, exec);
    // A linear whose bytes match nothing: is it the learner's weight transposed?
    ref.transposed = [&](const std::string& name) {
      const PreparedLinear *have = engine.model().find_linear(name), *want = learner.find_linear(name);
      return have && want && holds_transpose(*have, *want);
    };
    return ref;
  };
  SyncReport r = apply_and_check(engine, version, receive, reference, s, probe, rollout, rollout_version, exec);
  r.build_seconds = build;
  r.bytes = static_cast<int64_t>(bytes.size());
  return r;
}

}  // namespace mxrl
