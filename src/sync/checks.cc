#include "sync/checks.h"

#include <chrono>
#include <map>
#include <set>

#include <fmt/format.h>

#include "model/score.h"
#include "sampler/sampling.h"
#include "sync/mismatch.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/text.h"

namespace mxrl {

const char* check_mode_name(CheckMode m) {
  switch (m) {
    case CheckMode::Stop: return "stop";
    case CheckMode::Warn: return "warn";
    case CheckMode::Off: return "off";
  }
  return "?";
}

CheckMode parse_check_mode(const std::string& s) {
  if (s == "stop") return CheckMode::Stop;
  if (s == "warn") return CheckMode::Warn;
  if (s == "off") return CheckMode::Off;
  fail("unknown check mode '{}' (stop, warn, off)", s);
}

const std::vector<std::string>& check_names() {
  static const std::vector<std::string> n = {"coverage",  "placement", "grid",     "exceptions",
                                             "freshness", "atomicity", "agreement"};
  return n;
}

namespace {
bool high_precision(const TensorDigest& d) { return d.part == "bf16" || d.part == "f32"; }

using Key = std::pair<std::string, std::string>;  // (name, part)

std::map<Key, const TensorDigest*> index(const std::vector<TensorDigest>& m, std::vector<std::string>& dups,
                                         const char* side) {
  std::map<Key, const TensorDigest*> out;
  for (const TensorDigest& d : m)
    if (!out.emplace(Key{d.name, d.part}, &d).second)
      dups.push_back(fmt::format("{} [{}]: written more than once ({})", d.name, d.part, side));
  return out;
}

std::map<std::string, std::set<std::string>> parts_by_name(const std::vector<TensorDigest>& m) {
  std::map<std::string, std::set<std::string>> out;
  for (const TensorDigest& d : m) out[d.name].insert(d.part);
  return out;
}

CheckResult result(const std::string& name, std::vector<std::string> findings, Clock::time_point t0) {
  CheckResult r;
  r.name = name;
  r.ran = true;
  r.passed = findings.empty();
  r.findings = std::move(findings);
  r.seconds = seconds_since(t0);
  return r;
}
}  // namespace

std::vector<CheckResult> check_manifests(const std::vector<TensorDigest>& expected,
                                         const std::vector<TensorDigest>& live,
                                         const std::vector<TensorDigest>& previous,
                                         const std::function<bool(const std::string& name)>& transposed) {
  const auto t0 = Clock::now();
  std::vector<std::string> coverage, placement, grid, exceptions, ignored;
  const auto exp = index(expected, coverage, "expected");
  const auto got = index(live, coverage, "sampler");
  const auto prev = index(previous, ignored, "previous");
  const auto exp_parts = parts_by_name(expected), got_parts = parts_by_name(live);
  // Whose bytes are these? (a tensor holding another's bytes is misplaced)
  std::map<uint64_t, std::string> owner;
  for (const TensorDigest& d : expected) owner.emplace(d.xxh3, d.name + " [" + d.part + "]");
  for (const auto& [name, parts] : exp_parts) {
    auto it = got_parts.find(name);
    if (it == got_parts.end()) {
      coverage.push_back(fmt::format("missing {}: the sampler does not compute with it", name));
      continue;
    }
    if (it->second == parts) continue;
    const TensorDigest& e = *exp.at(Key{name, *parts.begin()});
    const TensorDigest& g = *got.at(Key{name, *it->second.begin()});
    if (g.precision == e.precision) {  // same precision, a part missing or extra
      for (const std::string& p : parts)
        if (!it->second.count(p)) coverage.push_back(fmt::format("missing {} [{}]", name, p));
      for (const std::string& p : it->second)
        if (!parts.count(p)) coverage.push_back(fmt::format("extra {} [{}]", name, p));
      continue;
    }
    // Same name, other parts: the tensor arrived in another precision.
    std::string line = fmt::format("{}: the sampler computes it as {} ({}), the learner as {} ({})", name, g.precision,
                                   fmt::join(it->second, "+"), e.precision, fmt::join(parts, "+"));
    (high_precision(e) ? exceptions : grid).push_back(std::move(line));
  }
  for (const auto& [name, parts] : got_parts)
    if (!exp_parts.count(name))
      coverage.push_back(fmt::format("extra {}: not expected under the sampler's plan", name));
  // Tensors of which some part was written by this sync (it holds this
  // version's bytes, which differ from the previous version's).
  std::set<std::string> written;
  for (const auto& [key, e] : exp) {
    auto it = got.find(key);
    auto p = prev.find(key);
    if (it != got.end() && p != prev.end() && it->second->xxh3 == e->xxh3 && p->second->xxh3 != e->xxh3)
      written.insert(key.first);
  }
  for (const auto& [key, e] : exp) {
    auto it = got.find(key);
    if (it == got.end() || got_parts.at(key.first) != exp_parts.at(key.first)) continue;
    const TensorDigest& g = *it->second;
    const std::string at = fmt::format("{} [{}]", key.first, key.second);
    auto& bucket = high_precision(*e) ? exceptions : grid;
    if (g.shape != e->shape)
      placement.push_back(fmt::format("{}: shape {}, expected {}", at, shape_str(g.shape), shape_str(e->shape)));
    else if (g.dtype != e->dtype)
      bucket.push_back(fmt::format("{}: dtype {}, expected {}", at, g.dtype, e->dtype));
    else if (g.precision != e->precision)
      bucket.push_back(fmt::format("{}: precision {}, expected {}", at, g.precision, e->precision));
    else if (g.xxh3 != e->xxh3) {
      auto o = owner.find(g.xxh3);
      auto p = prev.find(key);
      if (p != prev.end() && p->second->xxh3 == g.xxh3 && written.count(key.first))
        bucket.push_back(
            fmt::format("{}: still holds the previous version's bytes beside this version's other parts", at));
      else if (p != prev.end() && p->second->xxh3 == g.xxh3)
        coverage.push_back(fmt::format("{}: still holds the previous version's bytes (not written by this sync)", at));
      else if (o != owner.end())
        placement.push_back(fmt::format("{}: holds the bytes of {}", at, o->second));
      else if (transposed && transposed(key.first))
        placement.push_back(fmt::format("{}: holds the learner's weight transposed", at));
      else
        bucket.push_back(
            fmt::format("{}: bytes differ from the learner's (xxh3 {:016x}, expected {:016x})", at, g.xxh3, e->xxh3));
    }
  }
  std::vector<CheckResult> out;
  out.push_back(result("coverage", std::move(coverage), t0));
  out.push_back(result("placement", std::move(placement), t0));
  out.push_back(result("grid", std::move(grid), t0));
  out.push_back(result("exceptions", std::move(exceptions), t0));
  const double each = seconds_since(t0) / 4;  // one comparison serves the four
  for (CheckResult& r : out) r.seconds = each;
  return out;
}

bool holds_transpose(const PreparedLinear& live, const PreparedLinear& expected) {
  if (live.n != live.k || expected.n != live.n || expected.k != live.k) return false;
  const WeightView a = live.view(), e = expected.view();
  double norm = 0, d_same = 0, d_transposed = 0;
  for (int64_t n = 0; n < live.n; ++n)
    for (int64_t k = 0; k < live.k; ++k) {
      const double x = weight_value(a, n, k), same = weight_value(e, n, k), t = weight_value(e, k, n);
      norm += same * same, d_same += (x - same) * (x - same), d_transposed += (x - t) * (x - t);
    }
  return norm > 0 && d_transposed <= 0.01 * norm && d_same >= 0.25 * norm;
}

CheckResult check_freshness(const Engine& engine, const Exec& exec) {
  const auto t0 = Clock::now();
  std::vector<std::string> f;
  const uint64_t v = engine.version();
  for (const DerivedObject& d : engine.derived_objects())
    if (d.version != v)
      f.push_back(fmt::format("{} {}: built under version {}, live version {}", d.kind, d.name, d.version, v));
  if (!engine.plan_is_live()) f.push_back("plan: the execution plan computes with a model other than the live one");
  for (const PreparedLinear* l : engine.model().linears()) {
    const PackedWeight fresh = PackedWeight::pack(l->view(), exec);
    if (fresh.fingerprint() != l->packed.fingerprint())
      f.push_back(fmt::format("packed {}: the GEMM copy does not re-pack from the live weights", l->name));
  }
  return result("freshness", std::move(f), t0);
}

CheckResult check_atomicity(const Engine& engine, const Expectation& e, const std::vector<GeneratedSample>& samples,
                            uint64_t rollout_version, const std::vector<TensorDigest>& live) {
  const auto t0 = Clock::now();
  std::vector<std::string> f;
  for (const GeneratedSample& s : samples) {
    if (s.version != rollout_version)
      f.push_back(fmt::format("sample {}.{}: generated under version {}, meant for {}", s.request, s.index, s.version,
                              rollout_version));
    for (size_t t = 0; t < s.token_versions.size(); ++t)
      if (s.token_versions[t] != s.version) {
        f.push_back(fmt::format("sample {}.{}: token [{}] under version {}, the sample under {}", s.request, s.index, t,
                                s.token_versions[t], s.version));
        break;
      }
  }
  if (e.sync_failed) {
    if (live != e.previous_manifest) {
      int64_t changed = 0;
      for (size_t i = 0; i < live.size() && i < e.previous_manifest.size(); ++i)
        changed += !(live[i] == e.previous_manifest[i]);
      f.push_back(fmt::format("the failed sync to version {} left {} tensors changed: the sampler serves a mix",
                              e.version, changed + static_cast<int64_t>(live.size() != e.previous_manifest.size())));
    }
  } else if (engine.version() != e.version || engine.update_pending()) {
    f.push_back(fmt::format("the sampler reports version {}{}, expected {}", engine.version(),
                            engine.update_pending() ? " with an update still staged" : "", e.version));
  }
  return result("atomicity", std::move(f), t0);
}

std::vector<std::vector<float>> probe_reference(const Model& learner, const Probe& probe, const Exec& learner_exec) {
  std::vector<std::vector<float>> out;
  for (const auto& tok : probe.tokens) out.push_back(sequence_logits(learner, tok, learner_exec));
  return out;
}

CheckResult check_agreement(const Model& learner, const Engine& engine, const Probe& probe, const AgreementBound& bound,
                            const Exec& learner_exec) {
  return check_agreement(probe_reference(learner, probe, learner_exec), engine, probe, bound);
}

CheckResult check_agreement(const std::vector<std::vector<float>>& reference, const Engine& engine, const Probe& probe,
                            const AgreementBound& bound) {
  const auto t0 = Clock::now();
  if (probe.tokens.size() != probe.prompt_len.size()) fail("agreement probe: tokens and prompt lengths disagree");
  if (reference.size() != probe.tokens.size())
    fail("agreement: {} reference rows for {} probe sequences", reference.size(), probe.tokens.size());
  const int64_t V = engine.model().config().vocab_size;
  MismatchStats stats;
  std::vector<float> scratch;
  int64_t unequal = 0;
  std::string first;
  for (size_t i = 0; i < probe.tokens.size(); ++i) {
    const auto& tok = probe.tokens[i];
    const std::vector<float>& ref = reference[i];
    if (ref.size() != tok.size() * static_cast<size_t>(V))
      fail("agreement: probe {}: {} reference logits, expected {} x {}", i, ref.size(), tok.size(), V);
    const std::vector<float> got = engine.sequence_logits(tok);
    for (size_t t = static_cast<size_t>(probe.prompt_len[i]); t < tok.size(); ++t) {
      const float* rl = &ref[(t - 1) * V];
      const float* rs = &got[(t - 1) * V];
      const float lp_l = token_logprob(rl, V, probe.temperature, tok[t], scratch);
      const float lp_s = token_logprob(rs, V, probe.temperature, tok[t], scratch);
      stats.add(lp_l, lp_s, exact_kl(rs, rl, V, probe.temperature));
      if (lp_l != lp_s && unequal++ == 0)
        first = fmt::format("probe {} token [{}]: sampler log-prob {:.9g}, learner {:.9g}", i, t, lp_s, lp_l);
    }
  }
  std::vector<std::string> f;
  if (bound.bitwise && unequal > 0)
    f.push_back(
        fmt::format("{} of {} probe tokens differ from the learner's log-probs (same plan: must be bitwise); {}",
                    unequal, stats.tokens(), first));
  if (!bound.bitwise && stats.tokens() > 0) {
    if (stats.kl_mean() > bound.max_kl)
      f.push_back(
          fmt::format("mean exact KL {:.3g} per token exceeds the bound {:.3g}", stats.kl_mean(), bound.max_kl));
    if (stats.abs_dlogp_max() > bound.max_abs_dlogp)
      f.push_back(
          fmt::format("max |dlogp| {:.3g} exceeds the bound {:.3g}", stats.abs_dlogp_max(), bound.max_abs_dlogp));
  }
  CheckResult r = result("agreement", std::move(f), t0);
  r.measured = stats.to_json();
  r.measured["bitwise_required"] = bound.bitwise;
  return r;
}

}  // namespace mxrl
