#include "dist/distributed.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <xxhash.h>

#include "faults/hooks.h"
#include "model/digest.h"
#include "sampler/sample_io.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/error.h"

namespace mxrl {

using nlohmann::json;

namespace {
// Commands, broadcast by rank 0 on the learner or the sampler communicator.
enum Cmd : uint8_t { kInit = 1, kGenerate = 2, kSync = 3, kTrain = 4, kStop = 9 };
// Point-to-point tags (to rank 0).
enum Tag : int { kSamples = 1, kReport = 2, kRoots = 3, kDigest = 4 };

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}
std::string as_string(const std::vector<std::byte>& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

uint64_t weights_digest(const ParamTable& p) {
  const std::vector<float>& s = p.storage();
  return XXH3_64bits(s.data(), s.size() * sizeof(float));
}

void write_sequences(ByteWriter& w, const std::vector<Sequence>& b) {
  w.put<uint64_t>(b.size());
  for (const Sequence& s : b) w.put_vec(s.tokens), w.put_vec(s.target), w.put_vec(s.weight);
}

std::vector<Sequence> read_sequences(ByteReader& r) {
  const uint64_t n = r.get<uint64_t>();
  if (n > (uint64_t{1} << 32)) fail("train batch: {} sequences is out of range", n);
  std::vector<Sequence> b;
  for (uint64_t i = 0; i < n; ++i) {
    Sequence& s = b.emplace_back();
    s.tokens = r.get_vec<int32_t>(), s.target = r.get_vec<uint8_t>(), s.weight = r.get_vec<float>();
  }
  return b;
}

void write_probe(ByteWriter& w, const Probe& p) {
  w.put<uint64_t>(p.tokens.size());
  for (const auto& t : p.tokens) w.put_vec(t);
  w.put_vec(p.prompt_len);
  w.put<float>(p.temperature);
}

Probe read_probe(ByteReader& r) {
  Probe p;
  const uint64_t n = r.get<uint64_t>();
  if (n > (uint64_t{1} << 24)) fail("probe: {} sequences is out of range", n);
  for (uint64_t i = 0; i < n; ++i) p.tokens.push_back(r.get_vec<int32_t>());
  p.prompt_len = r.get_vec<int64_t>();
  p.temperature = r.get<float>();
  if (p.prompt_len.size() != p.tokens.size()) fail("probe: {} sequences but {} prompt lengths", n, p.prompt_len.size());
  return p;
}

SyncReport report_from_json(const json& j) {
  SyncReport r;
  r.version = j.at("version").get<uint64_t>();
  r.applied = j.at("applied").get<bool>();
  r.bytes = j.at("bytes").get<int64_t>();
  r.build_seconds = j.at("build_s").get<double>();
  r.apply_seconds = j.at("apply_s").get<double>();
  r.check_seconds = j.at("checks_s").get<double>();
  if (j.contains("error")) r.error = j["error"].get<std::string>();
  for (const std::string& name : check_names()) {
    if (!j.at("checks").contains(name)) continue;
    const json& c = j["checks"][name];
    CheckResult cr;
    cr.name = name;
    cr.ran = true;
    cr.passed = c.at("passed").get<bool>();
    cr.seconds = c.at("seconds").get<double>();
    cr.findings = c.at("findings").get<std::vector<std::string>>();
    if (c.contains("measured")) cr.measured = c["measured"];
    r.checks.push_back(std::move(cr));
  }
  return r;
}

// The samplers' reports as one: applied and passed only if every rank's is;
// findings prefixed with their rank when there are several.
SyncReport merge_reports(const std::vector<std::pair<int, SyncReport>>& rs) {
  SyncReport m = rs.front().second;
  const bool several = rs.size() > 1;
  m.applied = true;
  m.error.clear();
  m.checks.clear();
  std::map<std::string, CheckResult> by_name;
  std::vector<std::string> order;
  for (const auto& [rank, r] : rs) {
    const std::string who = several ? fmt::format("rank {}: ", rank) : "";
    m.applied = m.applied && r.applied;
    if (!r.error.empty()) m.error += (m.error.empty() ? "" : "; ") + who + r.error;
    m.apply_seconds = std::max(m.apply_seconds, r.apply_seconds);
    m.check_seconds = std::max(m.check_seconds, r.check_seconds);
    for (const CheckResult& c : r.checks) {
      auto it = by_name.find(c.name);
      if (it == by_name.end()) {
        order.push_back(c.name);
        it = by_name.emplace(c.name, c).first;
        it->second.findings.clear();
      }
      CheckResult& t = it->second;
      t.passed = t.passed && c.passed;
      t.seconds = std::max(t.seconds, c.seconds);
      for (const std::string& f : c.findings) t.findings.push_back(who + f);
    }
  }
  for (const std::string& n : order) m.checks.push_back(by_name.at(n));
  return m;
}

PrecisionPlan sampler_plan_of(const RlConfig& cfg) {
  return cfg.sampler_plan.empty() ? cfg.learner.recipe.precision_plan() : PrecisionPlan::resolve(cfg.sampler_plan);
}

[[noreturn]] void die(const std::string& who, const std::string& what) {
  std::fprintf(stderr, "mxrl rl: %s: %s\n", who.c_str(), what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}
}  // namespace

struct Cluster::State {
  MpiComm learners, samplers;  // rank 0 is world rank 0 in both
  int L = 1, S = 1;
  // Rank 0.
  json cfg_json;
  FaultPlan faults;
  std::shared_ptr<ChunkSender> sender;
  bool samplers_ready = false;
  int64_t pending_step = -1;   // a rollout in flight (sent, not yet gathered)
  int64_t gathered_step = -1;  // a rollout gathered early (before a sync), not yet handed out
  std::vector<GeneratedSample> gathered;
  bool busy = false;  // in the middle of an exchange
  Learner* learner = nullptr;

  std::vector<GeneratedSample> gather_samples(int64_t step) {
    std::vector<GeneratedSample> out;
    for (int s = 1; s <= S; ++s) {
      const std::vector<std::byte> b = samplers.recv(s, kSamples);
      ByteReader r(b, fmt::format("samples of step {} from sampler rank {}", step, L - 1 + s));
      for (GeneratedSample& g : read_samples(r)) out.push_back(std::move(g));
      r.expect_done();
    }
    return out;
  }

  void send_generate(int64_t step, const std::vector<GenerationRequest>& reqs) {
    if (pending_step >= 0) fail("distributed: step {}'s rollout is still in flight", pending_step);
    ByteWriter w;
    w.put<uint8_t>(kGenerate);
    write_requests(w, reqs);
    samplers.bcast(w.bytes(), 0);
    pending_step = step;
  }

  // Gathers a rollout in flight now: a sampler must finish it (and send it)
  // before it can take a sync.
  void gather_pending() {
    if (pending_step < 0) return;
    gathered = gather_samples(pending_step);
    gathered_step = pending_step;
    pending_step = -1;
  }

  std::vector<GeneratedSample> collect(int64_t step, const std::vector<GenerationRequest>& reqs) {
    if (gathered_step == step) {
      gathered_step = -1;
      return std::move(gathered);
    }
    busy = true;
    if (pending_step < 0) send_generate(step, reqs);
    if (pending_step != step) fail("distributed: step {}'s rollout is in flight, not step {}'s", pending_step, step);
    std::vector<GeneratedSample> out = gather_samples(step);
    pending_step = -1;
    busy = false;
    return out;
  }

  void init_samplers(const SyncSettings& s, const Probe& probe) {
    ByteWriter w;
    w.put<uint8_t>(kInit);
    w.put_str(cfg_json.dump());
    w.put<uint8_t>(s.bound.bitwise ? 1 : 0);
    write_probe(w, probe);
    samplers.bcast(w.bytes(), 0);
    samplers_ready = true;
  }

  SyncReport sync(Learner& learner, const SyncSettings& s, const Probe& probe, uint64_t v, json& ranks,
                  const Exec& exec) {
    busy = true;
    gather_pending();
    if (!samplers_ready) init_samplers(s, probe);
    const PrecisionPlan& plan = *s.sampler_plan;
    auto t0 = Clock::now();
    const std::vector<std::byte> bytes = build_bundle_bytes(learner.model(), learner.params(), plan, v, s, exec);
    const std::vector<ChunkFrame> frames = sender->frames(bytes, v, s.hooks.channel.get());
    const double build = seconds_since(t0);  // the bundle and its chunk headers
    ByteWriter w;
    w.put<uint8_t>(kSync);
    w.put<uint64_t>(v);
    w.put<uint64_t>(frames.size());
    samplers.bcast(w.bytes(), 0);
    bcast_chunks(samplers, 0, frames);
    double reference_s = 0;
    if (s.checks != CheckMode::Off) {
      t0 = Clock::now();
      const CheckReference ref = learner_reference(learner.model(), learner.params(), plan, v, s, probe, exec);
      ByteWriter rw;
      rw.put_str(digests_to_json(ref.manifest).dump());
      rw.put<uint8_t>(ref.agreement ? 1 : 0);
      rw.put<uint64_t>(ref.probe_logits.size());
      for (const auto& row : ref.probe_logits) rw.put_vec(row);
      samplers.bcast(rw.bytes(), 0);
      reference_s = seconds_since(t0);
    }
    std::vector<std::pair<int, SyncReport>> reports;
    ranks = json::array();
    for (int i = 1; i <= S; ++i) {
      const std::vector<std::byte> b = samplers.recv(i, kReport);
      json j;
      try {
        j = json::parse(as_string(b));
      } catch (const json::exception& e) {
        fail("the report of sampler rank {} is not JSON: {}", L - 1 + i, e.what());
      }
      j["rank"] = L - 1 + i;
      ranks.push_back(j);
      reports.emplace_back(L - 1 + i, report_from_json(j));
    }
    SyncReport m = merge_reports(reports);
    m.bytes = static_cast<int64_t>(bytes.size());
    m.build_seconds = build;
    m.check_seconds += reference_s;
    busy = false;
    return m;
  }

  StepResult train(Learner& learner, const std::vector<Sequence>& batch, float temperature) {
    busy = true;
    const auto t0 = Clock::now();
    ByteWriter w;
    w.put<uint8_t>(kTrain);
    w.put<float>(temperature);
    write_sequences(w, batch);
    learners.bcast(w.bytes(), 0);
    StepResult r;
    std::vector<double> mb_loss, mb_aux;
    auto roots = learner.shard_grads(batch, {0, L}, mb_loss, mb_aux, &r, temperature);
    for (int i = 1; i < L; ++i) {
      const std::vector<std::byte> b = learners.recv(i, kRoots);
      ByteReader rd(b, fmt::format("gradient of learner rank {}", i));
      const uint64_t n = rd.get<uint64_t>();
      for (uint64_t k = 0; k < n; ++k) {
        const int64_t index = rd.get<int64_t>();
        roots.emplace_back(index, rd.get_vec<float>());
      }
      const std::vector<double> l = rd.get_vec<double>(), a = rd.get_vec<double>();
      rd.expect_done();
      if (l.size() != mb_loss.size() || a.size() != mb_aux.size())
        fail("learner rank {}: {} micro-batch losses, expected {}", i, l.size(), mb_loss.size());
      for (size_t k = 0; k < l.size(); ++k)
        if (!std::isnan(l[k])) mb_loss[k] = l[k], mb_aux[k] = a[k];
    }
    std::sort(roots.begin(), roots.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    PairwiseSum sum;
    for (auto& [index, g] : roots) sum.add(std::move(g));
    std::vector<float> grads = sum.finish();
    if (static_cast<int64_t>(grads.size()) != learner.params().numel())
      fail("distributed: the summed gradient has {} values, the model {}", grads.size(), learner.params().numel());
    learners.bcast_floats(grads, 0);
    r.loss = r.aux_loss = 0;
    for (size_t k = 0; k < mb_loss.size(); ++k) {
      if (std::isnan(mb_loss[k])) fail("distributed: no learner computed micro-batch {}", k);
      r.loss += mb_loss[k], r.aux_loss += mb_aux[k];
    }
    if (batch[0].weight.empty()) r.loss /= static_cast<double>(r.targets);
    const auto t1 = Clock::now();
    r.optim = learner.apply_grads(grads);
    r.optimizer_seconds = seconds_since(t1);
    r.seconds = seconds_since(t0);
    busy = false;
    return r;
  }
};

Cluster::Cluster(int learners, int samplers) : learners_(learners), st_(std::make_unique<State>()) {
  if (learners < 1 || samplers < 1)
    fail("--learners and --samplers must be at least 1 (got {} and {})", learners, samplers);
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != learners + samplers)
    fail("--learners {} --samplers {} need {} MPI ranks, this job has {}: run `mpirun -np {} mxrl rl ...`", learners,
         samplers, learners + samplers, size, learners + samplers);
  st_->L = learners, st_->S = samplers;
  const bool learner = world_rank_ < learners;
  st_->learners = MpiComm::split(MPI_COMM_WORLD, learner ? 0 : MPI_UNDEFINED, world_rank_);
  st_->samplers = MpiComm::split(MPI_COMM_WORLD, world_rank_ == 0 || !learner ? 1 : MPI_UNDEFINED, world_rank_);
}

Cluster::~Cluster() = default;

const char* Cluster::role() const { return world_rank_ < learners_ ? "learner" : "sampler"; }

std::shared_ptr<RlRemote> Cluster::remote(const Exec& exec) {
  if (!coordinator()) fail("distributed: only rank 0 runs the RL loop");
  State* st = st_.get();
  auto r = std::make_shared<RlRemote>();
  r->init = [st](RlRun& run) {
    st->busy = true;
    st->cfg_json = run.config().to_json();
    st->faults = FaultPlan::parse(run.config().inject);
    st->sender = std::make_shared<ChunkSender>(static_cast<size_t>(run.config().sync_chunk_bytes));
    st->learner = &run.learner();
    // The learners start from rank 0's state: settings, masters, moments.
    ByteWriter w;
    w.put<uint8_t>(kInit);
    w.put_str(st->cfg_json.dump());
    w.put_str(run.learner().params().config().to_json().dump());
    w.put_vec(run.learner().params().storage());
    w.put_vec(run.learner().optimizer().m());
    w.put_vec(run.learner().optimizer().v());
    w.put<int64_t>(run.learner().optimizer().step());
    st->learners.bcast(w.bytes(), 0);
    st->busy = false;
  };
  r->generate = [st](int64_t step, const std::vector<GenerationRequest>& reqs) { return st->collect(step, reqs); };
  r->prefetch = [st](int64_t step, const std::vector<GenerationRequest>& reqs) { st->send_generate(step, reqs); };
  r->train = [st](Learner& l, const std::vector<Sequence>& b, float t) { return st->train(l, b, t); };
  r->sync = [st, exec](Learner& l, const SyncSettings& s, const Probe& probe, uint64_t v, json& ranks) {
    return st->sync(l, s, probe, v, ranks, exec);
  };
  return r;
}

void Cluster::stop(bool compare_weights) {
  State& st = *st_;
  if (st.busy) die("rank 0", "stopped in the middle of an exchange; aborting every rank");
  st.gather_pending();  // drain a rollout in flight: the samplers are sending it
  compare_weights = compare_weights && st.learner && st.L > 1;
  st.samplers.bcast(std::vector<std::byte>{std::byte{kStop}}, 0);
  st.learners.bcast(std::vector<std::byte>{std::byte{kStop}, std::byte{compare_weights ? uint8_t{1} : uint8_t{0}}}, 0);
  if (!compare_weights) return;
  const uint64_t mine = weights_digest(st.learner->params());
  for (int i = 1; i < st.L; ++i) {
    const std::vector<std::byte> b = st.learners.recv(i, kDigest);
    ByteReader r(b, fmt::format("weights digest of learner rank {}", i));
    const uint64_t theirs = r.get<uint64_t>();
    if (theirs != mine)
      fail("learner rank {} ends with other weights than rank 0 (XXH3 {:016x} vs {:016x})", i, theirs, mine);
  }
}

namespace {

void serve_learner(MpiComm& comm, const Exec& exec) {
  std::unique_ptr<Learner> learner;
  for (;;) {
    const std::vector<std::byte> msg = comm.bcast({}, 0);
    ByteReader r(msg, fmt::format("command to learner rank {}", comm.rank()));
    const uint8_t cmd = r.get<uint8_t>();
    if (cmd == kStop) {
      if (r.get<uint8_t>() == 0) return;
      if (!learner) fail("asked for its weights before any were sent");
      ByteWriter w;
      w.put<uint64_t>(weights_digest(learner->params()));
      comm.send(w.bytes(), 0, kDigest);
      return;
    }
    if (cmd == kInit) {
      const RlConfig cfg = RlConfig::from_json(json::parse(r.get_str()));
      const ModelConfig mc = ModelConfig::from_json(json::parse(r.get_str()), "init: model config");
      ParamTable params(mc);
      const std::vector<float> p = r.get_vec<float>();
      std::vector<float>& s = params.storage();
      if (p.size() != s.size()) fail("init: {} weights for a model of {}", p.size(), s.size());
      std::copy(p.begin(), p.end(), s.begin());
      learner = std::make_unique<Learner>(std::move(params), cfg.learner, exec);
      learner->optimizer().m() = r.get_vec<float>();
      learner->optimizer().v() = r.get_vec<float>();
      learner->optimizer().set_step(r.get<int64_t>());
      r.expect_done();
      continue;
    }
    if (cmd != kTrain || !learner) fail("unexpected command {}", cmd);
    const float temperature = r.get<float>();
    const std::vector<Sequence> batch = read_sequences(r);
    r.expect_done();
    std::vector<double> mb_loss, mb_aux;
    const auto roots = learner->shard_grads(batch, {comm.rank(), comm.size()}, mb_loss, mb_aux, nullptr, temperature);
    ByteWriter w;
    w.put<uint64_t>(roots.size());
    for (const auto& [index, g] : roots) w.put<int64_t>(index), w.put_vec(g);
    w.put_vec(mb_loss);
    w.put_vec(mb_aux);
    comm.send(w.bytes(), 0, kRoots);
    std::vector<float> grads(static_cast<size_t>(learner->params().numel()));
    comm.bcast_floats(grads, 0);
    learner->apply_grads(grads);
  }
}

void serve_sampler(MpiComm& comm, int world_rank, int first_sampler_world_rank, const Exec& exec) {
  const int index = comm.rank() - 1, count = comm.size() - 1;  // this sampler among the samplers
  std::unique_ptr<Engine> engine;
  RlConfig cfg;
  PrecisionPlan plan;
  SyncSettings settings;
  Probe probe;
  FaultPlan faults;
  FaultSeams hooks;
  ModelConfig model_cfg;
  std::vector<GeneratedSample> last_rollout;
  uint64_t last_rollout_version = 0;
  const std::string who = fmt::format("sampler rank {}", world_rank);
  for (;;) {
    const std::vector<std::byte> msg = comm.bcast({}, 0);
    ByteReader r(msg, "command to " + who);
    const uint8_t cmd = r.get<uint8_t>();
    if (cmd == kStop) return;
    if (cmd == kInit) {
      cfg = RlConfig::from_json(json::parse(r.get_str()));
      plan = sampler_plan_of(cfg);
      faults = FaultPlan::parse(cfg.inject);
      hooks = make_fault_hooks(faults);
      settings.mode = cfg.sync;
      settings.checks = cfg.checks;
      settings.agreement_every = cfg.agreement_every;
      settings.bound.bitwise = r.get<uint8_t>() != 0;
      settings.bound.max_kl = cfg.agreement_max_kl;
      settings.bound.max_abs_dlogp = cfg.agreement_max_abs_dlogp;
      settings.hooks = hooks.sync;
      settings.sampler_plan = plan;
      probe = read_probe(r);
      r.expect_done();
      continue;
    }
    if (cmd == kGenerate) {
      if (!engine) fail("asked to generate before the first sync");
      const std::vector<GenerationRequest> reqs = read_requests(r);
      r.expect_done();
      const size_t b = reqs.size() * static_cast<size_t>(index) / static_cast<size_t>(count);
      const size_t e = reqs.size() * static_cast<size_t>(index + 1) / static_cast<size_t>(count);
      last_rollout_version = engine->version();
      for (size_t i = b; i < e; ++i) engine->submit(reqs[i]);
      last_rollout = engine->run();
      ByteWriter w;
      write_samples(w, last_rollout);
      comm.send(w.bytes(), 0, kSamples);
      continue;
    }
    if (cmd != kSync) fail("unexpected command {}", cmd);
    const uint64_t v = r.get<uint64_t>();
    const uint64_t n = r.get<uint64_t>();
    r.expect_done();
    Staging staging(v, "transfer");
    std::string refused = bcast_chunks(comm, 0, n, staging, [&](uint64_t i) {
      if (i == n / 2 && world_rank == first_sampler_world_rank && faults.active(Fault::SamplerKilled, v)) {
        std::fprintf(stderr, "mxrl rl: %s: killed half way through the bundle of version %llu (fault sampler-killed)\n",
                     who.c_str(), static_cast<unsigned long long>(v));
        std::fflush(stderr);
        std::raise(SIGKILL);
      }
    });
    std::vector<std::byte> bytes;
    if (refused.empty()) {
      try {
        bytes = staging.take();
      } catch (const Error& e) {
        refused = e.what();
      }
    }
    if (!engine) {
      // The first version builds the engine (then is applied to it as every later one).
      if (!refused.empty()) fail("the first bundle (version {}) was refused: {}", v, refused);
      const Bundle bundle = parse_bundle(bytes, fmt::format("bundle v{}", v));
      model_cfg = ModelConfig::from_json(bundle.config, fmt::format("bundle v{}: config", v));
      auto model = bundle.mode == SyncMode::Ship
                       ? std::make_shared<const Model>(
                             Model::from_shipment(model_cfg, plan, bundle_to_shipment(bundle, model_cfg), exec))
                       : std::make_shared<const Model>(bundle_to_params(bundle, model_cfg), plan, exec);
      EngineOptions opt;
      opt.record_logits = true;
      engine =
          std::make_unique<Engine>(std::move(model), std::numeric_limits<uint64_t>::max(), opt, exec, hooks.engine);
      last_rollout_version = v;
    }
    auto receive = [&]() -> std::vector<std::byte> {
      if (!refused.empty()) fail("{}", refused);
      return bytes;
    };
    auto reference = [&] {
      const std::vector<std::byte> b = comm.bcast({}, 0);
      ByteReader rd(b, "check reference of version " + std::to_string(v));
      CheckReference ref;
      ref.manifest = digests_from_json(json::parse(rd.get_str()));
      ref.agreement = rd.get<uint8_t>() != 0;
      const uint64_t rows = rd.get<uint64_t>();
      for (uint64_t i = 0; i < rows; ++i) ref.probe_logits.push_back(rd.get_vec<float>());
      rd.expect_done();
      return ref;
    };
    const SyncReport rep =
        apply_and_check(*engine, v, receive, reference, settings, probe, last_rollout, last_rollout_version, exec);
    comm.send(as_bytes(rep.to_json().dump()), 0, kReport);
  }
}

}  // namespace

void Cluster::serve(const Exec& exec) {
  if (coordinator()) fail("distributed: rank 0 runs the RL loop, not serve()");
  const std::string who = fmt::format("{} rank {}", role(), world_rank_);
  try {
    if (world_rank_ < learners_)
      serve_learner(st_->learners, exec);
    else
      serve_sampler(st_->samplers, world_rank_, learners_, exec);
  } catch (const std::exception& e) {
    die(who, e.what());
  }
}

void run_rl_job(const RunSpec& spec, const RlConfig& cfg, int learners, int samplers, const Exec& exec,
                const std::function<void(RlRun&)>& body) {
  const bool distributed = learners > 0 || samplers > 0;
  if (distributed && (learners < 1 || samplers < 1))
    fail("a distributed run needs both --learners L and --samplers S (each at least 1), got {} and {}", learners,
         samplers);
  if (!distributed) {
    RlSession s = open_rl(spec, cfg, exec);
    body(s.run);
    return;
  }
  check_spec(spec);
  if (spec.resume.empty()) (void)task_of(spec, cfg.task);  // refused before MPI starts
  // mpirun -np L+S mxrl rl ... --learners L --samplers S: rank 0 runs the
  // loop with the cluster doing rollout, training and sync; the others serve.
  MpiSession session(nullptr, nullptr);
  Cluster cluster(learners, samplers);
  if (!cluster.coordinator()) return cluster.serve(exec);
  std::optional<RlSession> run;  // outlives stop(), which compares the learners' weights with its own
  try {
    auto remote = cluster.remote(exec);
    run.emplace(open_rl(spec, cfg, exec, std::move(remote)));
    body(run->run);
  } catch (const Error&) {
    cluster.stop(
        run.has_value());  // every other rank ends cleanly (or the job is aborted mid-exchange); then the error
    throw;
  }
  cluster.stop();
}

}  // namespace mxrl
