#include "train/grpo.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "faults/hooks.h"
#include "learner/train_state.h"
#include "model/checkpoint.h"
#include "sampler/sample_io.h"
#include "sync/mismatch.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/json_read.h"

namespace mxrl {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
constexpr const char* kCtx = "RL settings";
constexpr const char* kPendingRollout = "pending_rollout.bin";
}  // namespace

// ---- settings ----

const SettingsTable<RlConfig>& rl_fields() {
  using R = RlConfig;
  static const SettingsTable<R> t = [] {
    auto loss = [](auto member) {
      return [member](R & c) -> auto& { return c.loss.*member; };
    };
    SettingsTable<R> t = {
        setting_field<R>("task", "Built-in task (addition[:digits=D,carry_drop=P], multiplication, sort, countdown)",
                         &R::task),
        setting_field<R>("steps", "RL steps (each: generate, score, update, sync)", &R::steps).min(1),
        setting_field<R>("prompts_per_step", "Prompts per step (P)", &R::prompts_per_step).min(1),
        setting_field<R>("samples_per_prompt", "Samples per prompt (G)", &R::samples_per_prompt).min(1),
        setting_field<R>("max_new_tokens", "Generation limit (0: longest answer + 8)", &R::max_new_tokens).min(0),
        setting_field<R>("temperature", "Sampling temperature (the learner scores at the same one)", &R::temperature)
            .above(0),
        setting_field<R>("seed", "Problem stream and sampling seed", &R::seed),
        setting_enum_field<R>("adv_norm", "Advantage: std ((r - mean) / (std + eps)) or none (r - mean, Dr. GRPO)",
                              &R::adv_norm, std::vector<AdvNorm>{AdvNorm::Std, AdvNorm::None},
                              [](AdvNorm v) { return name(v); }),
        setting_field<R>("adv_eps", "eps of the advantage normalisation", &R::adv_eps).min(0),
        setting_field<R>("clip_low", "PPO clip: ratio >= 1 - clip_low", loss(&PolicyLossConfig::clip_low))
            .min(0)
            .below(1),
        setting_field<R>("clip_high", "PPO clip: ratio <= 1 + clip_high", loss(&PolicyLossConfig::clip_high)).min(0),
        setting_enum_field<R>(
            "loss_agg", "token-mean, seq-mean-token-sum or seq-mean-token-mean", loss(&PolicyLossConfig::agg),
            std::vector<LossAgg>{LossAgg::TokenMean, LossAgg::SeqMeanTokenSum, LossAgg::SeqMeanTokenMean},
            [](LossAgg v) { return name(v); }),
        setting_enum_field<R>(
            "rollout_correction", "none, tis (truncated importance weights) or mis (masking)",
            loss(&PolicyLossConfig::correction),
            std::vector<RolloutCorrection>{RolloutCorrection::None, RolloutCorrection::TIS, RolloutCorrection::MIS},
            [](RolloutCorrection v) { return name(v); }),
        setting_field<R>("correction_cap", "C of TIS / MIS", loss(&PolicyLossConfig::cap)).min(1),
        setting_field<R>("updates_per_batch", "Mini-batch updates per step (K)", &R::updates_per_batch).min(1),
        setting_field<R>("sampler_plan",
                         "The sampler's precision plan (default: the recipe's): bf16, mxfp8, mxfp8-half, mxfp8-floor, "
                         "fp8-block128, +fp8kv, a .toml",
                         &R::sampler_plan),
        setting_enum_field<R>(
            "sync",
            "ship (the learner's forward weights, byte for byte) or requantize (BF16 copies, quantized by "
            "the sampler)",
            &R::sync, std::vector<SyncMode>{SyncMode::Ship, SyncMode::Requantize}, sync_mode_name),
        setting_enum_field<R>("checks", "stop (a failed check ends the run), warn, or off", &R::checks,
                              std::vector<CheckMode>{CheckMode::Stop, CheckMode::Warn, CheckMode::Off},
                              check_mode_name),
        // Optional (states saved before fault injection existed have none).
        setting_field<R>("inject",
                         "Inject a sync fault, NAME or NAME@STEP (from the sync that ends step STEP; repeatable). "
                         "See `mxrl faults --list`",
                         &R::inject)
            .optional_key(),
        setting_field<R>("agreement_every", "Run the agreement check on every Nth version (0: never)",
                         &R::agreement_every)
            .min(0),
        setting_field<R>("agreement_max_kl", "Agreement bound when the plans differ: mean exact KL per token",
                         &R::agreement_max_kl)
            .min(0),
        setting_field<R>("agreement_max_abs_dlogp", "Agreement bound when the plans differ: max |dlogp|",
                         &R::agreement_max_abs_dlogp)
            .min(0),
        setting_field<R>("probe_prompts", "Held-out prompts (with answers) in the agreement probe", &R::probe_prompts)
            .min(0),
        // Optional (states saved before the distributed runtime were on-policy, 1 MiB chunks).
        setting_field<R>(
            "off_policy",
            "0: on-policy; 1: the samplers generate step t+1 under version t while the learner trains step t "
            "(staleness beyond it is refused)",
            &R::off_policy)
            .range(0, 1)
            .optional_key(),
        setting_field<R>("sync_chunk_bytes", "Payload bytes per chunk of a weight sync on the wire",
                         &R::sync_chunk_bytes)
            .range(1, static_cast<double>(int64_t{1} << 40))
            .optional_key(),
        setting_field<R>("eval_every", "Steps between held-out greedy evaluations (0: before and after only)",
                         &R::eval_every)
            .min(0),
        setting_field<R>("eval_problems", "Held-out problems per evaluation", &R::eval_problems).min(0),
        setting_field<R>("save_every", "Keep a training-state directory every K steps (0: only final)", &R::save_every)
            .min(0),
    };
    for (auto& f : setting_nest<R>(learner_fields(), &R::learner, "")) t.push_back(std::move(f));
    setting_find_field(t, "optim.lr")->help =
        "Peak learning rate (1e-4 is what `mxrl demo` uses for GRPO on the built-in tasks)";
    return t;
  }();
  return t;
}

json RlConfig::to_json() const { return settings_to_json(rl_fields(), *this); }

RlConfig RlConfig::from_json(const json& j) {
  RlConfig c;
  settings_from_json(rl_fields(), j, c, kCtx);
  c.learner.optim.validate();
  return c;
}

void RlConfig::validate() const {
  setting_check_bounds(rl_fields(), *this, kCtx);
  loss.validate();
  if (updates_per_batch < 1 || updates_per_batch > prompts_per_step * samples_per_prompt)
    fail("updates_per_batch must be in [1, prompts x samples = {}], got {}", prompts_per_step * samples_per_prompt,
         updates_per_batch);
  learner.optim.validate();
  const FaultPlan faults = FaultPlan::parse(inject);
  if (off_policy > 0 && faults.injected(Fault::SyncMidGeneration))
    fail("--inject sync-mid-generation models an on-policy pipeline; it cannot run with --off-policy {}", off_policy);
}

json RlStepStats::to_json() const {
  json j = {{"step", step},
            {"version", version},
            {"reward_mean", reward_mean},
            {"reward_std", reward_std},
            {"accuracy", accuracy},
            {"response_len", response_len_mean},
            {"samples", samples},
            {"groups", groups},
            {"zero_adv_groups", zero_adv_groups},
            {"trained_sequences", trained_sequences},
            {"skipped_updates", skipped_updates},
            {"undecodable", undecodable},
            {"mismatch", mismatch},
            {"entropy", entropy},
            {"policy_loss", policy_loss},
            {"ppo_clip_frac", loss.clip_frac},
            {"is_mask_frac", loss.mask_frac},
            {"ratio_mean", loss.ratio_mean},
            {"ratio_max", loss.ratio_max},
            {"grad_norm", grad_norm},
            {"lr", lr},
            {"tokens", tokens},
            {"staleness_mean", staleness_mean},
            {"staleness_max", staleness_max},
            {"tokens_per_s", seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0},
            {"generate_s", generate_s},
            {"score_s", score_s},
            {"train_s", train_s},
            {"sync_s", sync_s},
            {"seconds", seconds}};
  j["sync"] = sync.to_json();
  if (!sync_ranks.is_null()) j["sync_ranks"] = sync_ranks;
  return j;
}

// ---- the run ----

void RlRun::init(ParamTable params, const std::string& tokenizer_json, const std::string& tokenizer_config_json,
                 const Exec& exec) {
  cfg_.validate();
  faults_ = FaultPlan::parse(cfg_.inject);
  exec_ = exec;
  if (!task_) task_ = make_task(cfg_.task, params.config().max_position_embeddings);
  setup_ = make_task_setup(*task_, params.config(), tokenizer_json, tokenizer_config_json, cfg_.seed,
                           cfg_.max_new_tokens, 200);
  learner_ = std::make_unique<Learner>(std::move(params), cfg_.learner, exec);
  // The probe: held-out prompts with their answers, from a stream the
  // evaluation does not use (seed + 1).
  for (int64_t i = 0; i < cfg_.probe_prompts; ++i) {
    const Problem p = task_->generate(Split::Eval, cfg_.seed + 1, static_cast<uint64_t>(i));
    std::vector<int32_t> t = setup_.tk->encode(p.prompt);
    probe_.prompt_len.push_back(static_cast<int64_t>(t.size()));
    for (int32_t a : setup_.tk->encode(p.answer)) t.push_back(a);
    t.push_back(setup_.eos);
    probe_.tokens.push_back(std::move(t));
  }
  probe_.temperature = cfg_.temperature;
  sync_.sender = std::make_shared<ChunkSender>(static_cast<size_t>(cfg_.sync_chunk_bytes));
}

namespace {
// The sampler's plan, refused at start when the sync mode cannot feed it.
PrecisionPlan sampler_plan_for(const RlConfig& cfg, const Learner& learner) {
  PrecisionPlan p = cfg.sampler_plan.empty() ? learner.plan() : PrecisionPlan::resolve(cfg.sampler_plan);
  if (cfg.sync == SyncMode::Ship) check_ship_compatible(learner.plan(), p, learner.params().config());
  return p;
}
}  // namespace

// The sampler starts from the learner's weights (its own model of them),
// and then receives version step_ through the sync like every later one.
void RlRun::sync_to_sampler(const RlEvents& ev, nlohmann::json* ranks) {
  const uint64_t v = static_cast<uint64_t>(step_);
  if (!sync_.sampler_plan) {
    const PrecisionPlan plan = sampler_plan_for(cfg_, *learner_);
    check_faults_apply(faults_, learner_->params().config(), learner_->plan(), plan, cfg_.sync, remote_ != nullptr);
    const FaultSeams hooks = make_fault_hooks(faults_);
    sync_.sampler_plan = plan;
    sync_.hooks = hooks.sync;
    sync_.mode = cfg_.sync;
    sync_.checks = cfg_.checks;
    sync_.agreement_every = cfg_.agreement_every;
    sync_.bound.bitwise = same_numerics(learner_->model(), plan, exec_);
    sync_.bound.max_kl = cfg_.agreement_max_kl;
    sync_.bound.max_abs_dlogp = cfg_.agreement_max_abs_dlogp;
    if (!remote_) {
      EngineOptions opt;
      opt.record_logits = true;  // exact KL needs the sampler's whole distributions
      engine_ = std::make_unique<Engine>(std::make_shared<const Model>(learner_->params(), plan, exec_),
                                         std::numeric_limits<uint64_t>::max(), opt, exec_, hooks.engine);
    }
  }
  nlohmann::json local;
  if (remote_)
    last_sync_ = remote_->sync(*learner_, sync_, probe_, v, ranks ? *ranks : local);
  else
    last_sync_ = sync_weights(learner_->model(), learner_->params(), *engine_, v, sync_, probe_, last_rollout_,
                              last_rollout_version_, {}, exec_);
  if (ev.on_sync) ev.on_sync(last_sync_);
  if (cfg_.checks == CheckMode::Stop && !last_sync_.passed()) {
    const std::vector<std::string> f = last_sync_.findings();
    fail("sync of version {} failed its checks ({} findings): {}", v, f.size(),
         fmt::join(f.begin(), f.begin() + std::min<size_t>(f.size(), 3), "; "));
  }
}

RlRun RlRun::start(const std::string& model_dir, const RlConfig& cfg, const Exec& exec) {
  return start(model_dir, cfg, nullptr, exec);
}

RlRun RlRun::start(const std::string& model_dir, const RlConfig& cfg, std::unique_ptr<Task> task, const Exec& exec) {
  return start_impl(model_dir, cfg, std::move(task), nullptr, exec);
}

RlRun RlRun::start_remote(const std::string& model_dir, const RlConfig& cfg, std::shared_ptr<RlRemote> remote,
                          const Exec& exec) {
  return start_impl(model_dir, cfg, nullptr, std::move(remote), exec);
}

RlRun RlRun::start_impl(const std::string& model_dir, const RlConfig& cfg, std::unique_ptr<Task> task,
                        std::shared_ptr<RlRemote> remote, const Exec& exec) {
  Checkpoint ck = load_checkpoint(model_dir);
  RlRun r;
  r.cfg_ = cfg;
  r.task_ = std::move(task);
  r.remote_ = std::move(remote);
  if (r.cfg_.learner.optim.schedule == LrSchedule::Cosine && r.cfg_.learner.optim.total_steps == 0)
    r.cfg_.learner.optim.total_steps = cfg.steps * cfg.updates_per_batch;
  r.init(std::move(ck.params), ck.tokenizer_json, ck.tokenizer_config_json, exec);
  if (r.remote_ && r.remote_->init) r.remote_->init(r);
  r.sync_to_sampler({});
  return r;
}

RlRun RlRun::resume(const std::string& state_dir, const Exec& exec) { return resume_impl(state_dir, nullptr, exec); }

RlRun RlRun::resume_remote(const std::string& state_dir, std::shared_ptr<RlRemote> remote, const Exec& exec) {
  return resume_impl(state_dir, std::move(remote), exec);
}

RlRun RlRun::resume_impl(const std::string& state_dir, std::shared_ptr<RlRemote> remote, const Exec& exec) {
  TrainState st = load_train_state(state_dir);
  if (!st.meta.contains("rl")) fail("{}: not an RL training state (no \"rl\" settings)", state_dir);
  RlRun r;
  r.remote_ = std::move(remote);
  r.cfg_ = RlConfig::from_json(st.meta["rl"]);
  r.step_ = json_integer(st.meta.contains("rl_step") ? st.meta["rl_step"] : json(), 0, r.cfg_.steps,
                         fmt::format("{}: \"rl_step\"", state_dir));
  r.init(std::move(st.params), st.tokenizer_json, st.tokenizer_config_json, exec);
  r.learner_->optimizer().restore(std::move(st.m), std::move(st.v), st.step, state_dir);
  r.last_rollout_version_ = static_cast<uint64_t>(r.step_);
  if (st.files.count(kPendingRollout)) {
    const std::string& b = st.files.at(kPendingRollout);
    ByteReader rd(std::as_bytes(std::span<const char>(b.data(), b.size())),
                  fmt::format("{}/{}", state_dir, kPendingRollout));
    r.prefetched_ = read_samples(rd);
    rd.expect_done();
    const int64_t want = r.cfg_.prompts_per_step * r.cfg_.samples_per_prompt;
    if (static_cast<int64_t>(r.prefetched_.size()) != want)
      fail("{}/{}: {} samples, expected {}", state_dir, kPendingRollout, r.prefetched_.size(), want);
    r.prefetched_step_ = r.step_;
    r.last_rollout_ = r.prefetched_;
    r.last_rollout_version_ = r.prefetched_.front().version;
  }
  if (r.remote_ && r.remote_->init) r.remote_->init(r);
  r.sync_to_sampler({});
  return r;
}

void RlRun::save(const std::string& dir) {
  TrainState st{learner_->params().config(), learner_->params(),           learner_->optimizer().m(),
                learner_->optimizer().v(),   learner_->optimizer().step(), json::object(),
                setup_.tokenizer_json,       setup_.tokenizer_config_json};
  st.meta["rl"] = cfg_.to_json();
  st.meta["rl_step"] = step_;  // the data position: next prompts are Train step*P ...
  st.meta["sampler_version"] = last_sync_.applied ? last_sync_.version : uint64_t{0};  // == rl_step after a clean sync
  if (prefetched_step_ == step_) {
    // Off-policy: the next step's rollout, generated under the previous
    // version, is part of the state (resuming cannot remake it).
    if (remote_ && prefetched_.empty()) prefetched_ = remote_->generate(step_, make_requests(step_));
    ByteWriter w;
    write_samples(w, prefetched_);
    st.files[kPendingRollout] = std::string(reinterpret_cast<const char*>(w.bytes().data()), w.bytes().size());
  }
  save_train_state(dir, st);
}

EvalResult RlRun::evaluate_now() {
  // Through the sampler; distributed, through the model the sampler is
  // expected to hold (the learner's weights under the sampler's plan).
  std::shared_ptr<const Model> m =
      engine_ ? engine_->shared_model() : std::make_shared<const Model>(learner_->params(), *sync_.sampler_plan, exec_);
  EvalResult e = evaluate(m, *task_, *setup_.tk, setup_.eos, cfg_.seed, cfg_.eval_problems, setup_.max_new, exec_);
  e.step = step_;
  return e;
}

std::vector<GenerationRequest> RlRun::make_requests(int64_t t, std::vector<Problem>* problems) const {
  const int64_t P = cfg_.prompts_per_step, G = cfg_.samples_per_prompt;
  std::vector<GenerationRequest> reqs;
  for (int64_t i = 0; i < P; ++i) {
    const uint64_t index = static_cast<uint64_t>(t * P + i);
    const Problem p = task_->generate(Split::Train, cfg_.seed, index);
    GenerationRequest req;
    req.id = static_cast<int64_t>(index);
    req.prompt = setup_.tk->encode(p.prompt);
    req.n = G;
    req.max_new_tokens = setup_.max_new;
    req.sampling.temperature = cfg_.temperature;
    req.stop_tokens = {setup_.eos};
    req.seed = cfg_.seed;
    reqs.push_back(std::move(req));
    if (problems) problems->push_back(p);
  }
  return reqs;
}

void RlRun::submit_rollout(int64_t t) {
  for (const GenerationRequest& req : make_requests(t)) engine_->submit(req);
}

void RlRun::prefetch(int64_t t) {
  prefetched_step_ = t;
  last_rollout_version_ = remote_ ? static_cast<uint64_t>(step_) : engine_->version();
  if (remote_) return remote_->prefetch(t, make_requests(t));
  submit_rollout(t);
  prefetched_ = engine_->run();
  last_rollout_ = prefetched_;
}

std::vector<GeneratedSample> RlRun::rollout(int64_t t) {
  std::vector<GeneratedSample> samples;
  if (prefetched_step_ == t) {  // off-policy: generated during the previous step
    prefetched_step_ = -1;
    samples = remote_ && prefetched_.empty() ? remote_->generate(t, make_requests(t)) : std::move(prefetched_);
    prefetched_.clear();
  } else if (remote_) {
    last_rollout_version_ = static_cast<uint64_t>(step_);
    samples = remote_->generate(t, make_requests(t));
  } else {
    last_rollout_version_ = engine_->version();
    if (presubmitted_ != t) submit_rollout(t);
    presubmitted_ = -1;
    samples = engine_->run();
    for (GeneratedSample& g : early_) samples.push_back(std::move(g));
    early_.clear();
    last_rollout_ = samples;
  }
  std::sort(samples.begin(), samples.end(), [](const GeneratedSample& a, const GeneratedSample& b) {
    return a.request != b.request ? a.request < b.request : a.index < b.index;
  });
  return samples;
}

RlStepStats RlRun::step_once(const RlEvents& ev) {
  const auto t_start = Clock::now();
  RlStepStats st;
  const int64_t P = cfg_.prompts_per_step, G = cfg_.samples_per_prompt;
  // 1. Rollout.
  auto t0 = Clock::now();
  std::vector<Problem> problems;
  std::vector<std::vector<int32_t>> prompts;
  for (GenerationRequest& r : make_requests(step_, &problems)) prompts.push_back(std::move(r.prompt));
  const std::vector<GeneratedSample> samples = rollout(step_);
  if (static_cast<int64_t>(samples.size()) != P * G)
    fail("the sampler returned {} samples, expected {}", samples.size(), P * G);
  // Staleness: how many versions behind the learner each sample is.
  st.version = samples.front().version;
  double stale_sum = 0;
  for (const GeneratedSample& g : samples) {
    if (g.version > static_cast<uint64_t>(step_))
      fail("sample {}/{} carries version {}, ahead of the learner's {}", g.request, g.index, g.version, step_);
    const int64_t stale = step_ - static_cast<int64_t>(g.version);
    // Refused, unless the checks only warn: then a sampler left on an old
    // version by a refused sync keeps serving it, and the staleness shows.
    if (stale > cfg_.off_policy && cfg_.checks == CheckMode::Stop)
      fail("sample {}/{} was generated under version {}, {} behind the learner's {}: beyond the off-policy bound {}",
           g.request, g.index, g.version, stale, step_, cfg_.off_policy);
    st.version = std::min(st.version, g.version);
    st.staleness_max = std::max(st.staleness_max, stale);
    stale_sum += static_cast<double>(stale);
  }
  st.staleness_mean = stale_sum / static_cast<double>(samples.size());
  // Off-policy: the next step's rollout starts now, under the weights the
  // samplers hold, while the learner trains on this one.
  if (cfg_.off_policy > 0 && step_ + 1 < cfg_.steps) prefetch(step_ + 1);
  st.generate_s = seconds_since(t0);
  // 2. Rewards and advantages.
  std::vector<double> rewards;
  int64_t response_tokens = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    std::vector<int32_t> t = samples[i].tokens;
    response_tokens += static_cast<int64_t>(t.size());
    if (!t.empty() && t.back() == setup_.eos) t.pop_back();
    // A padded model vocabulary can sample ids the tokenizer lacks: such a completion is wrong.
    const bool decodable = std::all_of(t.begin(), t.end(), [&](int32_t id) { return id < setup_.tk->vocab_size(); });
    st.undecodable += !decodable;
    rewards.push_back(decodable && task_->verify(problems[i / G], setup_.tk->decode(t)) ? 1.0 : 0.0);
  }
  AdvantageStats as;
  const std::vector<double> adv = group_advantages(rewards, G, cfg_.adv_norm, cfg_.adv_eps, &as);
  st.samples = P * G;
  st.groups = as.groups;
  st.zero_adv_groups = as.zero_groups;
  st.reward_mean = as.reward_mean;
  st.reward_std = as.reward_std;
  int64_t correct = 0;
  for (double r : rewards) correct += r > 0.5;
  st.accuracy = static_cast<double>(correct) / static_cast<double>(rewards.size());
  st.response_len_mean = static_cast<double>(response_tokens) / static_cast<double>(samples.size());
  // 3. The learner scores the rollout: the old policy, and the mismatch.
  t0 = Clock::now();
  std::vector<Sequence> seqs(samples.size());
  std::vector<std::vector<float>> rollout_lp(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    Sequence& s = seqs[i];
    s.tokens = prompts[i / G];
    s.target.assign(s.tokens.size(), 0);
    for (int32_t t : samples[i].tokens) s.tokens.push_back(t), s.target.push_back(1);
    rollout_lp[i] = samples[i].logprobs;
  }
  const int64_t V = learner_->params().config().vocab_size;
  std::vector<std::vector<double>> kl(samples.size());
  double entropy_sum = 0;
  LogprobOptions lo;
  lo.temperature = cfg_.temperature;
  lo.on_row = [&](size_t i, size_t t, const float* row) {
    // A remote sampler may record no logits rows (an engine that returns only
    // log-probs): that token's exact KL is then unknown, not computed from nothing.
    kl[i].push_back(samples[i].logits.empty() ? std::numeric_limits<double>::quiet_NaN()
                                              : exact_kl(&samples[i].logits[t * V], row, V, cfg_.temperature));
    entropy_sum += entropy(row, V, cfg_.temperature);
  };
  const std::vector<std::vector<float>> old_lp = learner_->logprobs(seqs, lo);
  MismatchStats mm;
  for (size_t i = 0; i < seqs.size(); ++i)
    for (size_t t = 0; t < old_lp[i].size(); ++t) mm.add(old_lp[i][t], rollout_lp[i][t], kl[i][t]);
  st.mismatch = mm.to_json();
  st.entropy = response_tokens > 0 ? entropy_sum / static_cast<double>(response_tokens) : 0.0;
  st.score_s = seconds_since(t0);
  // 4. K mini-batch updates, each with the PPO-clip weights at the current parameters.
  t0 = Clock::now();
  const int64_t n = static_cast<int64_t>(seqs.size()), K = cfg_.updates_per_batch;
  const bool keep_zero = learner_->params().config().num_experts > 0 && cfg_.learner.aux_loss_coef > 0;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t b = n * k / K, e = n * (k + 1) / K;
    std::vector<Sequence> mb(seqs.begin() + b, seqs.begin() + e);
    std::vector<std::vector<float>> old(old_lp.begin() + b, old_lp.begin() + e);
    std::vector<std::vector<float>> roll(rollout_lp.begin() + b, rollout_lp.begin() + e);
    std::vector<double> a(adv.begin() + b, adv.begin() + e);
    const std::vector<std::vector<float>> cur = k == 0 ? old : learner_->logprobs(mb, {cfg_.temperature, {}});
    PolicyLossResult pl = policy_loss(cur, old, roll, a, cfg_.loss);
    std::vector<Sequence> train;
    for (size_t i = 0; i < mb.size(); ++i) {
      Sequence& s = mb[i];
      s.weight.assign(s.tokens.size(), 0.0f);
      const size_t first = s.tokens.size() - pl.weight[i].size();
      bool any = false;
      for (size_t t = 0; t < pl.weight[i].size(); ++t)
        s.weight[first + t] = pl.weight[i][t], any |= pl.weight[i][t] != 0.0f;
      if (any || keep_zero) train.push_back(std::move(s));
    }
    if (k == 0) st.loss = pl, st.policy_loss = pl.loss;
    st.trained_sequences += static_cast<int64_t>(train.size());
    if (train.empty()) {
      ++st.skipped_updates;
      continue;
    }
    const StepResult r =
        remote_ ? remote_->train(*learner_, train, cfg_.temperature) : learner_->step(train, cfg_.temperature);
    st.grad_norm = r.optim.grad_norm;
    st.lr = r.optim.lr;
    st.tokens += r.tokens;
  }
  st.loss.weight.clear();
  st.train_s = seconds_since(t0);
  // 5. Sync version step+1 to the sampler, and the checks.
  t0 = Clock::now();
  ++step_;
  st.step = step_;
  if (faults_.active(Fault::SyncMidGeneration, static_cast<uint64_t>(step_)) && step_ < cfg_.steps) {
    // The fault's pipelining: the next rollout starts before the sync, and the
    // sync (not draining) swaps weights under the samples in flight.
    submit_rollout(step_);
    presubmitted_ = step_;
    for (int i = 0; i < 2; ++i)
      for (GeneratedSample& g : engine_->step()) early_.push_back(std::move(g));
  }
  sync_to_sampler(ev, &st.sync_ranks);
  st.sync = last_sync_;
  st.sync_s = seconds_since(t0);
  st.seconds = seconds_since(t_start);
  return st;
}

std::vector<EvalResult> RlRun::run(const std::string& out_dir, const RlEvents& ev) {
  if (!out_dir.empty()) fs::create_directories(out_dir);
  std::vector<EvalResult> evals;
  auto eval_now = [&] {
    if (cfg_.eval_problems == 0) return;
    evals.push_back(evaluate_now());
    if (ev.on_eval) ev.on_eval(evals.back());
  };
  auto save_to = [&](const std::string& name) {
    const std::string dir = (fs::path(out_dir) / name).string();
    save(dir);
    if (ev.on_save) ev.on_save(dir);
  };
  eval_now();
  while (step_ < cfg_.steps) {
    const RlStepStats st = step_once(ev);
    if (ev.on_step) ev.on_step(st);
    if (cfg_.eval_every > 0 && step_ % cfg_.eval_every == 0 && step_ < cfg_.steps) eval_now();
    if (cfg_.save_every > 0 && step_ % cfg_.save_every == 0 && !out_dir.empty())
      save_to(fmt::format("step-{:06d}", step_));
  }
  eval_now();
  if (!out_dir.empty()) save_to("final");
  return evals;
}

}  // namespace mxrl
