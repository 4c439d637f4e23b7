// mxrl.rl: a GRPO run (train/grpo.h RlRun) driven from Python, with the
// rollout and the weight sync done by a Python object, the "remote" (e.g. an
// adapter over another inference engine). It is the RlRemote of the
// distributed runtime with Python in place of MPI: the learner, the rewards,
// the scoring, the optimizer and the sync bundle stay in C++, as in `mxrl rl`;
// the remote generates each step's samples and applies each version's bundle
// and runs the checks against what its engine then holds.
//
// Everything the remote returns is validated here, field by field, so that a
// broken adapter fails as one ValueError naming the sample or the field rather
// than as wrong training. The GIL is held throughout (the remote and the
// callbacks are Python); a Python exception raised in them propagates out of
// the call unchanged. python/mxrl/rl.py is the documented front.
#include <nanobind/nanobind.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "arrays.h"
#include "faults/faults.h"
#include "sync/bundle.h"
#include "sync/sync.h"
#include "train/grpo.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/settings.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& msg) { throw nb::value_error(msg.c_str()); }

const char* type_of(nb::handle h) { return Py_TYPE(h.ptr())->tp_name; }

// ---- reading what the remote returns: one ValueError naming the field ----

// `what` names the value ("remote.generate: sample 3 (request 7): tokens").
int64_t read_int(nb::handle h, const std::string& what) {
  int64_t v = 0;
  if (PyBool_Check(h.ptr()) || PyFloat_Check(h.ptr()) || !nb::try_cast<int64_t>(h, v))
    bad(fmt::format("{} must be an int, got {}", what, type_of(h)));
  return v;
}

double read_number(nb::handle h, const std::string& what) {
  double v = 0;
  if (PyBool_Check(h.ptr()) || !nb::try_cast<double>(h, v))
    bad(fmt::format("{} must be a number, got {}", what, type_of(h)));
  if (!std::isfinite(v)) bad(fmt::format("{} must be finite, got {}", what, v));
  return v;
}

bool read_bool(nb::handle h, const std::string& what) {
  if (!PyBool_Check(h.ptr())) bad(fmt::format("{} must be a bool, got {}", what, type_of(h)));
  return h.ptr() == Py_True;
}

std::string read_str(nb::handle h, const std::string& what) {
  if (!nb::isinstance<nb::str>(h)) bad(fmt::format("{} must be a str, got {}", what, type_of(h)));
  return nb::cast<std::string>(h);
}

template <typename T>
std::vector<T> read_list(nb::handle h, const std::string& what, const char* of) {
  std::vector<T> v;
  if (nb::isinstance<nb::str>(h) || nb::isinstance<nb::bytes>(h) || !nb::try_cast<std::vector<T>>(h, v))
    bad(fmt::format("{} must be a list of {}, got {}", what, of, type_of(h)));
  return v;
}

nb::dict read_dict(nb::handle h, const std::string& what) {
  if (!nb::isinstance<nb::dict>(h)) bad(fmt::format("{} must be a dict, got {}", what, type_of(h)));
  return nb::borrow<nb::dict>(h);
}

// Refuses a key of `d` outside `known` (a misspelt optional key would
// otherwise be silently left out).
void known_keys(const nb::dict& d, const std::vector<const char*>& known, const std::string& what) {
  for (auto [k, v] : d) {
    const std::string key = nb::isinstance<nb::str>(k) ? nb::cast<std::string>(k) : std::string(nb::repr(k).c_str());
    if (std::none_of(known.begin(), known.end(), [&](const char* n) { return key == n; }))
      bad(fmt::format("{}: unknown key '{}' (known: {})", what, key, fmt::join(known, ", ")));
  }
}

nb::handle required(const nb::dict& d, const char* key, const std::string& what) {
  if (!d.contains(key)) bad(fmt::format("{}: missing '{}'", what, key));
  return PyDict_GetItemString(d.ptr(), key);
}

// The value at `key`, or null when absent or None.
nb::handle optional_value(const nb::dict& d, const char* key) {
  PyObject* v = PyDict_GetItemString(d.ptr(), key);
  return v && v != Py_None ? nb::handle(v) : nb::handle();
}

// ---- the remote's halves ----

nb::object request_to_py(const GenerationRequest& r) {
  nb::dict d;
  d["id"] = r.id;
  d["prompt"] = nb::cast(r.prompt);
  d["n"] = r.n;
  d["max_new_tokens"] = r.max_new_tokens;
  d["temperature"] = r.sampling.temperature;
  d["stop_tokens"] = nb::cast(r.stop_tokens);
  d["seed"] = r.seed;
  return d;
}

GeneratedSample sample_from_py(nb::handle h, size_t i, const std::map<int64_t, const GenerationRequest*>& reqs,
                               int64_t vocab) {
  const nb::dict d = read_dict(h, fmt::format("remote.generate: sample {}", i));
  GeneratedSample g;
  g.request = read_int(required(d, "request", fmt::format("remote.generate: sample {}", i)),
                       fmt::format("remote.generate: sample {}: request", i));
  const std::string at = fmt::format("remote.generate: sample {} (request {})", i, g.request);
  known_keys(d, {"request", "index", "tokens", "logprobs", "finish", "version", "token_versions", "logits"}, at);
  const auto it = reqs.find(g.request);
  if (it == reqs.end()) bad(fmt::format("{}: request {} is none of this step's requests", at, g.request));
  const GenerationRequest& req = *it->second;
  g.index = read_int(required(d, "index", at), at + ": index");
  if (g.index < 0 || g.index >= req.n)
    bad(fmt::format("{}: index {} is outside [0, {}) (the request's n)", at, g.index, req.n));
  for (int64_t t : read_list<int64_t>(required(d, "tokens", at), at + ": tokens", "ints")) {
    if (t < 0 || t >= vocab)
      bad(fmt::format("{}: tokens[{}] = {} is outside the vocabulary [0, {})", at, g.tokens.size(), t, vocab));
    g.tokens.push_back(static_cast<int32_t>(t));
  }
  const size_t n = g.tokens.size();
  if (n == 0 || static_cast<int64_t>(n) > req.max_new_tokens)
    bad(fmt::format("{}: {} tokens; a sample has 1 to max_new_tokens = {}", at, n, req.max_new_tokens));
  g.logprobs = read_list<float>(required(d, "logprobs", at), at + ": logprobs", "floats");
  if (g.logprobs.size() != n) bad(fmt::format("{}: logprobs has {} entries for {} tokens", at, g.logprobs.size(), n));
  for (size_t t = 0; t < n; ++t)
    if (!std::isfinite(g.logprobs[t])) bad(fmt::format("{}: logprobs[{}] is {}", at, t, g.logprobs[t]));
  const std::string finish = read_str(required(d, "finish", at), at + ": finish");
  if (finish == "stop") {
    g.finish = FinishReason::Stop;
    // mxrl's sampler keeps the stop token, and the learner trains on it.
    if (std::find(req.stop_tokens.begin(), req.stop_tokens.end(), g.tokens.back()) == req.stop_tokens.end())
      bad(
          fmt::format("{}: finish is 'stop' but the last token {} is none of the stop tokens {} (keep the stop token "
                      "in tokens)",
                      at, g.tokens.back(), fmt::format("{}", req.stop_tokens)));
  } else if (finish == "length") {
    g.finish = FinishReason::Length;
  } else {
    bad(fmt::format("{}: finish must be 'stop' or 'length', got '{}'", at, finish));
  }
  const int64_t version = read_int(required(d, "version", at), at + ": version");
  if (version < 0) bad(fmt::format("{}: version must be >= 0, got {}", at, version));
  g.version = static_cast<uint64_t>(version);
  if (nb::handle tv = optional_value(d, "token_versions")) {
    for (int64_t v : read_list<int64_t>(tv, at + ": token_versions", "ints")) {
      if (v < 0) bad(fmt::format("{}: token_versions[{}] must be >= 0, got {}", at, g.token_versions.size(), v));
      g.token_versions.push_back(static_cast<uint64_t>(v));
    }
    if (g.token_versions.size() != n)
      bad(fmt::format("{}: token_versions has {} entries for {} tokens", at, g.token_versions.size(), n));
  } else {
    g.token_versions.assign(n, g.version);
  }
  if (nb::handle lh = optional_value(d, "logits")) {
    AnyArray a;
    if (!nb::try_cast<AnyArray>(lh, a))
      bad(fmt::format("{}: logits must be a float32 array [tokens, vocab], got {}", at, type_of(lh)));
    const nb::dlpack::dtype dt = a.dtype();
    if (dt.code != static_cast<uint8_t>(nb::dlpack::dtype_code::Float) || dt.bits != 32 || dt.lanes != 1)
      bad(fmt::format("{}: logits must be float32, got {}", at, dtype_str(a)));
    if (a.ndim() != 2 || a.shape(0) != n || static_cast<int64_t>(a.shape(1)) != vocab)
      bad(fmt::format("{}: logits has shape {}, expected [{}, {}] (a row per token, the whole vocabulary)", at,
                      shape_str(shape_of(a)), n, vocab));
    require_contiguous(a, (at + ": logits").c_str());
    const float* p = static_cast<const float*>(a.data());
    g.logits.assign(p, p + n * static_cast<size_t>(vocab));
  }
  return g;
}

std::vector<GeneratedSample> samples_from_py(nb::handle h, const std::vector<GenerationRequest>& reqs, int64_t vocab) {
  if (!nb::isinstance<nb::list>(h))
    bad(fmt::format("remote.generate must return a list of sample dicts, got {}", type_of(h)));
  std::map<int64_t, const GenerationRequest*> by_id;
  for (const GenerationRequest& r : reqs) by_id[r.id] = &r;
  std::vector<GeneratedSample> out;
  std::set<std::pair<int64_t, int64_t>> seen;
  std::map<int64_t, int64_t> count;
  size_t i = 0;
  for (nb::handle s : nb::borrow<nb::list>(h)) {
    out.push_back(sample_from_py(s, i, by_id, vocab));
    const GeneratedSample& g = out.back();
    if (!seen.insert({g.request, g.index}).second)
      bad(fmt::format("remote.generate: sample {} (request {}): index {} is returned twice", i, g.request, g.index));
    ++count[g.request];
    ++i;
  }
  for (const GenerationRequest& r : reqs)
    if (count[r.id] != r.n)
      bad(fmt::format("remote.generate: request {} got {} samples, expected n = {}", r.id, count[r.id], r.n));
  return out;
}

nb::object probe_to_py(const Probe& p) {
  nb::dict d;
  d["tokens"] = nb::cast(p.tokens);
  d["prompt_len"] = nb::cast(p.prompt_len);
  d["temperature"] = p.temperature;
  return d;
}

SyncReport report_from_py(nb::handle h, uint64_t version, size_t bundle_bytes) {
  const std::string at = "remote.sync";
  const nb::dict d = read_dict(h, at + ": the report");
  known_keys(d, {"applied", "error", "bytes", "apply_seconds", "check_seconds", "checks"}, at);
  SyncReport r;
  r.version = version;
  r.applied = read_bool(required(d, "applied", at), at + ": applied");
  if (nb::handle e = optional_value(d, "error")) r.error = read_str(e, at + ": error");
  if (!r.applied && r.error.empty()) bad(at + ": applied is false but no 'error' says why");
  r.bytes = static_cast<int64_t>(bundle_bytes);
  if (nb::handle b = optional_value(d, "bytes")) {
    r.bytes = read_int(b, at + ": bytes");
    if (r.bytes < 0) bad(fmt::format("{}: bytes must be >= 0, got {}", at, r.bytes));
  }
  for (auto [key, slot] :
       {std::pair{"apply_seconds", &r.apply_seconds}, std::pair{"check_seconds", &r.check_seconds}}) {
    *slot = read_number(required(d, key, at), fmt::format("{}: {}", at, key));
    if (*slot < 0) bad(fmt::format("{}: {} must be >= 0, got {}", at, key, *slot));
  }
  nb::handle checks = required(d, "checks", at);
  if (!nb::isinstance<nb::list>(checks)) bad(fmt::format("{}: checks must be a list, got {}", at, type_of(checks)));
  const std::vector<std::string>& names = check_names();
  size_t i = 0;
  for (nb::handle ch : nb::borrow<nb::list>(checks)) {
    const std::string c_at = fmt::format("{}: checks[{}]", at, i++);
    const nb::dict cd = read_dict(ch, c_at);
    known_keys(cd, {"name", "ran", "passed", "findings", "seconds", "measured"}, c_at);
    CheckResult c;
    c.name = read_str(required(cd, "name", c_at), c_at + ".name");
    if (std::find(names.begin(), names.end(), c.name) == names.end())
      bad(fmt::format("{}.name: unknown check '{}' (the checks: {})", c_at, c.name, fmt::join(names, ", ")));
    for (const CheckResult& o : r.checks)
      if (o.name == c.name) bad(fmt::format("{}: check '{}' is reported twice", c_at, c.name));
    c.ran = read_bool(required(cd, "ran", c_at), c_at + ".ran");
    c.passed = read_bool(required(cd, "passed", c_at), c_at + ".passed");
    c.findings = read_list<std::string>(required(cd, "findings", c_at), c_at + ".findings", "str");
    if (c.ran && !c.passed && c.findings.empty())
      bad(fmt::format("{} ({}): passed is false but findings is empty (a failed check names what it found)", c_at,
                      c.name));
    c.seconds = read_number(required(cd, "seconds", c_at), c_at + ".seconds");
    if (nb::handle m = optional_value(cd, "measured")) {
      read_dict(m, c_at + ".measured");
      c.measured = py_to_json(m, (c_at + ".measured").c_str());
    }
    r.checks.push_back(std::move(c));
  }
  // SyncReport keeps its checks in condition order, whatever order they came in.
  auto rank = [&](const CheckResult& c) { return std::find(names.begin(), names.end(), c.name) - names.begin(); };
  std::sort(r.checks.begin(), r.checks.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  return r;
}

// What the remote needs besides the Python object: the model's vocabulary
// (known once the run is set up) and the learner's threads.
struct RemoteState {
  nb::object remote;
  int64_t vocab = 0;
  Exec exec;
};

void refuse_for_python_remote(const RlConfig& cfg) {
  if (cfg.off_policy > 0)
    bad(
        fmt::format("off_policy {}: a Python remote generates each step's rollout on demand; off-policy rollouts "
                    "(generated while the learner trains) are not supported, use off_policy 0",
                    cfg.off_policy));
  std::vector<std::string> learner_faults;
  for (const FaultInfo& f : fault_table())
    if (f.seam == FaultSeam::Learner) learner_faults.push_back(f.name);
  const FaultPlan faults = FaultPlan::parse(cfg.inject);
  for (const Injection& in : faults.injections()) {
    const FaultInfo& f = fault_info(in.fault);
    if (f.seam != FaultSeam::Learner)
      bad(
          fmt::format("inject {}: a fault of the {} seam lives in the sampler, which the Python remote runs; mxrl "
                      "injects only learner faults ({}) there (the remote injects the others itself: "
                      "mxrl.faults.catalogue())",
                      f.name, seam_name(f.seam), fmt::join(learner_faults, ", ")));
  }
}

std::shared_ptr<RlRemote> python_remote(nb::object remote, const Exec& exec) {
  for (const char* m : {"generate", "sync"})
    if (!nb::hasattr(remote, m) || !PyCallable_Check(remote.attr(m).ptr()))
      throw nb::type_error(fmt::format("remote: {} has no method '{}' (a remote has generate(step, requests) and "
                                       "sync(version, bundle, reference); see mxrl.rl)",
                                       type_of(remote), m)
                               .c_str());
  auto st = std::make_shared<RemoteState>();
  st->remote = std::move(remote);
  st->exec = exec;
  auto r = std::make_shared<RlRemote>();
  r->init = [st](RlRun& run) {
    refuse_for_python_remote(run.config());
    st->vocab = run.learner().params().config().vocab_size;
  };
  r->generate = [st](int64_t step, const std::vector<GenerationRequest>& reqs) {
    nb::list rs;
    for (const GenerationRequest& q : reqs) rs.append(request_to_py(q));
    return samples_from_py(st->remote.attr("generate")(step, rs), reqs, st->vocab);
  };
  r->prefetch = [](int64_t, const std::vector<GenerationRequest>&) -> void {
    fail("a Python remote does not prefetch (off_policy 0)");  // refused at start; never reached
  };
  r->train = [](Learner& learner, const std::vector<Sequence>& batch, float temperature) {
    return learner.step(batch, temperature);
  };
  r->sync = [st](Learner& learner, const SyncSettings& s, const Probe& probe, uint64_t v, json&) {
    const auto t0 = Clock::now();
    const PrecisionPlan& plan = *s.sampler_plan;
    const std::vector<std::byte> bytes = build_bundle_bytes(learner.model(), learner.params(), plan, v, s, st->exec);
    // With the checks off no agreement is due, so the probe is not run for nothing.
    SyncSettings rs = s;
    if (s.checks == CheckMode::Off) rs.agreement_every = 0;
    const CheckReference ref = learner_reference(learner.model(), learner.params(), plan, v, rs, probe, st->exec);
    const double build = seconds_since(t0);
    nb::dict reference;
    reference["manifest"] = json_to_py(digests_to_json(ref.manifest));
    reference["agreement"] = ref.agreement;
    if (ref.agreement) {
      const int64_t V = learner.params().config().vocab_size;
      nb::list rows;
      for (size_t i = 0; i < ref.probe_logits.size(); ++i) {
        float* p = nullptr;
        auto a = new_array<float>({static_cast<int64_t>(probe.tokens[i].size()), V}, &p);
        std::copy(ref.probe_logits[i].begin(), ref.probe_logits[i].end(), p);
        rows.append(a);
      }
      reference["probe_logits"] = rows;
    }
    reference["probe"] = probe_to_py(probe);
    nb::dict bound;
    bound["bitwise"] = s.bound.bitwise;
    bound["max_kl"] = s.bound.max_kl;
    bound["max_abs_dlogp"] = s.bound.max_abs_dlogp;
    reference["bound"] = bound;
    reference["checks"] = check_mode_name(s.checks);
    reference["plan"] = plan.name;
    nb::bytes b(bytes.data(), bytes.size());
    // What the sampler must end up holding: the bundle as built with no fault at the learner's
    // seam (a learner fault edits what travels, never what the checks compare against).
    if (s.hooks.learner) {
      SyncSettings clean = s;
      clean.hooks.learner = nullptr;
      const std::vector<std::byte> want = build_bundle_bytes(learner.model(), learner.params(), plan, v, clean, st->exec);
      reference["expected_bundle"] = nb::bytes(want.data(), want.size());
    } else {
      reference["expected_bundle"] = b;
    }
    SyncReport report = report_from_py(st->remote.attr("sync")(v, b, reference), v, bytes.size());
    report.build_seconds = build;
    return report;
  };
  return r;
}

RlConfig config_from_py(nb::handle h) {
  constexpr const char* kCtx = "RL settings";
  const json patch = h.is_none() ? json::object() : py_to_json(h, "config");
  RlConfig cfg = RlConfig::from_json(settings_overlay(rl_fields(), RlConfig{}.to_json(), patch, kCtx));
  cfg.validate();
  return cfg;
}

// ---- the run ----

struct PyRlRun {
  std::shared_ptr<ThreadPool> pool;  // declared first: the run's learner computes on it until the end
  std::unique_ptr<RlRun> run;
  bool busy = false;  // a call is in progress (a callback calling back into the run is refused)
};

// Marks the run busy for one call; a nested call (from a callback) is refused.
class Busy {
 public:
  explicit Busy(PyRlRun& r) : r_(r) {
    if (r_.busy)
      throw std::runtime_error("RlRun: a call is already in progress (a callback must not call back into its run)");
    r_.busy = true;
  }
  ~Busy() { r_.busy = false; }
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;

 private:
  PyRlRun& r_;
};

void check_callback(nb::handle f, const char* name) {
  if (!f.is_none() && !PyCallable_Check(f.ptr()))
    throw nb::type_error(fmt::format("{} must be callable or None, got {}", name, type_of(f)).c_str());
}

PyRlRun rl_start(const std::filesystem::path& model_dir, nb::handle config, nb::object remote, int threads) {
  const RlConfig cfg = config_from_py(config);
  refuse_for_python_remote(cfg);  // before the model is loaded
  PyRlRun r;
  r.pool = std::make_shared<ThreadPool>(threads);
  const Exec exec{r.pool.get()};
  r.run = std::make_unique<RlRun>(RlRun::start_remote(model_dir.string(), cfg, python_remote(remote, exec), exec));
  return r;
}

PyRlRun rl_resume(const std::filesystem::path& state_dir, nb::object remote, int threads) {
  PyRlRun r;
  r.pool = std::make_shared<ThreadPool>(threads);
  const Exec exec{r.pool.get()};
  r.run = std::make_unique<RlRun>(RlRun::resume_remote(state_dir.string(), python_remote(remote, exec), exec));
  return r;
}

nb::object eval_to_py(const EvalResult& e) { return json_to_py(e.to_json()); }

nb::list rl_run(PyRlRun& r, const std::filesystem::path& out_dir, nb::object on_step, nb::object on_eval,
                nb::object on_sync) {
  check_callback(on_step, "on_step");
  check_callback(on_eval, "on_eval");
  check_callback(on_sync, "on_sync");
  Busy busy(r);
  RlEvents ev;
  if (!on_step.is_none()) ev.on_step = [&](const RlStepStats& st) { on_step(json_to_py(st.to_json())); };
  if (!on_eval.is_none()) ev.on_eval = [&](const EvalResult& e) { on_eval(eval_to_py(e)); };
  if (!on_sync.is_none()) ev.on_sync = [&](const SyncReport& s) { on_sync(json_to_py(s.to_json())); };
  nb::list out;
  for (const EvalResult& e : r.run->run(out_dir.string(), ev)) out.append(eval_to_py(e));
  return out;
}

nb::object rl_step_once(PyRlRun& r) {
  Busy busy(r);
  if (r.run->step() >= r.run->config().steps)
    bad(fmt::format("the run has taken all its {} steps", r.run->config().steps));
  return json_to_py(r.run->step_once().to_json());
}

}  // namespace

void bind_rl(nb::module_& m) {
  nb::class_<PyRlRun>(m, "RlRun",
                      R"doc(A GRPO run (`mxrl rl`) whose rollout and weight sync a Python object, the remote, does
(mxrl.rl documents the protocol in full):

remote.generate(step, requests) -> samples: requests are dicts {id, prompt, n, max_new_tokens,
temperature, stop_tokens, seed}; samples are dicts {request, index, tokens, logprobs, finish
("stop" | "length"), version, token_versions (optional), logits (optional float32 array
[len(tokens), vocab])}, n per request.

remote.sync(version, bundle, reference) -> report: bundle is the weight-sync bundle's bytes;
reference is {manifest, agreement, probe_logits (when agreement), probe, bound, checks, plan};
the report is {applied, error, bytes, apply_seconds, check_seconds, checks: [{name, ran,
passed, findings, seconds, measured}]}.

What the remote returns is checked field by field (ValueError naming the sample or field);
its exceptions, and the callbacks', propagate unchanged.)doc")
      .def_static("start", &rl_start, nb::arg("model_dir"), nb::arg("config").none(), nb::arg("remote"),
                  nb::arg("threads") = 0,
                  R"doc(A new run from a checkpoint directory. ``config``: a dict of RL settings in the training
state's form (RlRun.config), only the keys to change (None: the defaults); an unknown key,
a wrong type or a value out of bounds raises ValueError naming it. Loads the learner and
syncs version 0 to ``remote`` (its first remote.sync call) before returning.)doc")
      .def_static("resume", &rl_resume, nb::arg("state_dir"), nb::arg("remote"), nb::arg("threads") = 0,
                  "Continue a run saved by save() or run() with its saved settings; syncs the saved version to "
                  "``remote`` first.")
      .def("run", &rl_run, nb::arg("out_dir"), nb::arg("on_step") = nb::none(), nb::arg("on_eval") = nb::none(),
           nb::arg("on_sync") = nb::none(),
           R"doc(Run the remaining steps: a held-out greedy evaluation before the first and after the last,
a training state in out_dir/step-NNNNNN every save_every steps and out_dir/final ("" saves
nothing). The callbacks get dicts: on_step the step's figures (step_once's), on_eval each
evaluation (evaluate's), on_sync each sync report. Returns the evaluations.)doc")
      .def("step_once", &rl_step_once,
           "One step (rollout, rewards, scoring, update, sync of the next version); its figures as the metrics "
           "line of `mxrl rl` has them.")
      .def(
          "evaluate",
          [](PyRlRun& r) {
            Busy busy(r);
            return eval_to_py(r.run->evaluate_now());
          },
          "Held-out greedy accuracy of the current weights under the sampler's plan, computed by mxrl: "
          "{step, eval_accuracy, eval_correct, eval_total, eval_seconds}.")
      .def(
          "save",
          [](PyRlRun& r, const std::filesystem::path& dir) {
            Busy busy(r);
            r.run->save(dir.string());
          },
          nb::arg("dir"), "Write the training state (weights, optimizer, settings, step) for resume().")
      .def_prop_ro(
          "step", [](const PyRlRun& r) { return r.run->step(); }, "Steps taken (the learner's weight version).")
      .def_prop_ro(
          "config", [](const PyRlRun& r) { return json_to_py(r.run->config().to_json()); },
          "The run's settings, every key (the form start() takes).")
      .def_prop_ro(
          "probe", [](const PyRlRun& r) { return probe_to_py(r.run->probe()); },
          "The agreement check's probe batch: {tokens, prompt_len, temperature}.")
      .def_prop_ro(
          "last_sync", [](const PyRlRun& r) { return json_to_py(r.run->last_sync().to_json()); },
          "The report of the latest sync (after start/resume: the first), as on_sync gets it.")
      .def(
          "learner_manifest",
          [](PyRlRun& r) {
            Learner& l = r.run->learner();
            return json_to_py(
                digests_to_json(expected_manifest(l.model(), l.params(), r.run->sampler_plan(), Exec{r.pool.get()})));
          },
          "The manifest the sampler should hold at the current version (its plan; the form of "
          "Model.manifest()).");
}

}  // namespace mxrl
