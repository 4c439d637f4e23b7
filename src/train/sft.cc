#include "train/sft.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "learner/train_state.h"
#include "model/checkpoint.h"
#include "sampler/engine.h"
#include "sampler/prompts.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/json_read.h"

namespace mxrl {

namespace fs = std::filesystem;
using nlohmann::json;

const SettingsTable<SftConfig>& sft_fields() {
  using S = SftConfig;
  static const SettingsTable<S> t = [] {
    SettingsTable<S> t = {
        setting_field<S>("task",
                         "Built-in task: addition[:digits=D,carry_drop=P], multiplication[:digits=D], "
                         "sort[:len=L,max=M], countdown[:count=C,max=M]",
                         &S::task),
        setting_field<S>("steps", "Optimizer steps", &S::steps).min(1),
        setting_field<S>("batch_size", "Sequences per optimizer step", &S::batch_size).min(1),
    };
    for (auto& f : setting_nest<S>(learner_fields(), &S::learner, "")) t.push_back(std::move(f));
    for (auto f : {
             setting_field<S>("eval_every", "Steps between evaluations (0: only at the end)", &S::eval_every).min(0),
             setting_field<S>("eval_problems", "Held-out problems per evaluation", &S::eval_problems).min(0),
             setting_field<S>("max_new_tokens", "Generation limit at evaluation (0: longest answer + 8)",
                              &S::max_new_tokens)
                 .min(0),
             setting_field<S>("seed", "Problem stream seed", &S::seed),
             setting_field<S>("save_every", "Keep a training-state directory every K steps (0: only final)",
                              &S::save_every)
                 .min(0),
         })
      t.push_back(std::move(f));
    return t;
  }();
  return t;
}

json SftConfig::to_json() const { return settings_to_json(sft_fields(), *this); }

SftConfig SftConfig::from_json(const json& j) {
  SftConfig c;
  settings_from_json(sft_fields(), j, c, "SFT settings");
  c.learner.optim.validate();
  return c;
}

void SftConfig::validate() const {
  setting_check_bounds(sft_fields(), *this, "SFT settings");
  learner.optim.validate();
}

Sequence make_sft_sequence(const Tokenizer& tk, const Problem& p, int32_t eos) {
  Sequence s;
  s.tokens = tk.encode(p.prompt);
  if (s.tokens.empty()) fail("a problem has an empty prompt");
  s.target.assign(s.tokens.size(), 0);
  for (int32_t t : tk.encode(p.sft_target())) s.tokens.push_back(t), s.target.push_back(1);
  s.tokens.push_back(eos), s.target.push_back(1);
  return s;
}

nlohmann::json EvalResult::to_json() const {
  return {{"step", step},
          {"eval_accuracy", accuracy},
          {"eval_correct", correct},
          {"eval_total", total},
          {"eval_seconds", seconds}};
}

EvalResult evaluate(std::shared_ptr<const Model> model, const Task& task, const Tokenizer& tk, int32_t eos,
                    uint64_t seed, int64_t count, int64_t max_new_tokens, const Exec& exec) {
  const auto t0 = std::chrono::steady_clock::now();
  EvalResult r;
  Engine engine(std::move(model), 0, {}, exec);
  for (int64_t i = 0; i < count; ++i) {
    EvalSample s;
    s.problem = task.generate(Split::Eval, seed, static_cast<uint64_t>(i));
    GenerationRequest req;
    req.id = i;
    req.prompt = tk.encode(s.problem.prompt);
    req.max_new_tokens = max_new_tokens;
    req.sampling.temperature = 0.0f;  // greedy
    req.stop_tokens = {eos};
    engine.submit(req);
    r.samples.push_back(std::move(s));
  }
  for (GeneratedSample& g : engine.run()) {
    if (!g.tokens.empty() && g.tokens.back() == eos) g.tokens.pop_back();
    EvalSample& s = r.samples[g.request];
    // A padded model vocabulary can produce ids the tokenizer lacks: wrong, shown as such.
    const bool decodable =
        std::all_of(g.tokens.begin(), g.tokens.end(), [&](int32_t id) { return id < tk.vocab_size(); });
    s.completion = decodable ? tk.decode(g.tokens) : "<ids outside the tokenizer>";
    s.correct = decodable && task.verify(s.problem, s.completion);
    r.correct += s.correct;
  }
  r.total = count;
  r.accuracy = count > 0 ? static_cast<double>(r.correct) / static_cast<double>(count) : 0.0;
  r.seconds = seconds_since(t0);
  return r;
}

TaskSetup make_task_setup(const Task& task, const ModelConfig& c, const std::string& tokenizer_json,
                          const std::string& tokenizer_config_json, uint64_t seed, int64_t max_new_tokens,
                          int64_t count) {
  TaskSetup s;
  if (tokenizer_json.empty()) fail("the model has no tokenizer.json");
  s.tk = Tokenizer::from_json(tokenizer_json, "tokenizer.json");
  s.tokenizer_json = tokenizer_json;
  s.tokenizer_config_json = tokenizer_config_json;
  // Rollouts and evaluations stop on the one default of every sampler (sampler/prompts.h): the EOS token.
  const std::vector<int32_t> stop = default_stop_tokens(c);
  if (stop.size() != 1) fail("the model config has no valid eos_token_id");
  s.eos = stop[0];
  if (s.tk->vocab_size() > c.vocab_size)
    fail("the tokenizer has {} tokens, the model only {}", s.tk->vocab_size(), c.vocab_size);
  s.max_new = max_new_tokens;
  if (s.max_new == 0) {
    int64_t longest = 0;
    for (int64_t i = 0; i < count; ++i)
      longest = std::max<int64_t>(longest, s.tk->encode(task.generate(Split::Eval, seed, i).answer).size());
    s.max_new = longest + 8;
  }
  return s;
}

void SftRun::init(ParamTable params, const std::string& tokenizer_json, const std::string& tokenizer_config_json,
                  const Exec& exec) {
  cfg_.validate();
  exec_ = exec;
  task_ = make_task(cfg_.task, params.config().max_position_embeddings);
  setup_ = make_task_setup(*task_, params.config(), tokenizer_json, tokenizer_config_json, cfg_.seed,
                           cfg_.max_new_tokens, std::max<int64_t>(cfg_.eval_problems, 1));
  learner_ = std::make_unique<Learner>(std::move(params), cfg_.learner, exec);
}

SftRun SftRun::start(const std::string& model_dir, const SftConfig& cfg, const Exec& exec) {
  Checkpoint ck = load_checkpoint(model_dir);
  SftRun r;
  r.cfg_ = cfg;
  if (r.cfg_.learner.optim.schedule == LrSchedule::Cosine && r.cfg_.learner.optim.total_steps == 0)
    r.cfg_.learner.optim.total_steps = cfg.steps;
  r.init(std::move(ck.params), ck.tokenizer_json, ck.tokenizer_config_json, exec);
  return r;
}

SftRun SftRun::resume(const std::string& state_dir, const Exec& exec) {
  TrainState st = load_train_state(state_dir);
  if (!st.meta.contains("sft")) fail("{}: not an SFT training state (no \"sft\" settings)", state_dir);
  SftRun r;
  r.cfg_ = SftConfig::from_json(st.meta["sft"]);
  r.init(std::move(st.params), st.tokenizer_json, st.tokenizer_config_json, exec);
  r.learner_->optimizer().restore(std::move(st.m), std::move(st.v), st.step, state_dir);
  if (st.step > r.cfg_.steps) fail("{}: step {} is past the run's end ({})", state_dir, st.step, r.cfg_.steps);
  return r;
}

int64_t SftRun::step() const { return learner_->optimizer().step(); }

void SftRun::save(const std::string& dir) const {
  TrainState st{learner_->params().config(),
                learner_->params(),
                learner_->optimizer().m(),
                learner_->optimizer().v(),
                step(),
                json::object(),
                setup_.tokenizer_json,
                setup_.tokenizer_config_json};
  st.meta["sft"] = cfg_.to_json();
  st.meta["data_index"] = step() * cfg_.batch_size;  // next Train problem
  save_train_state(dir, st);
}

EvalResult SftRun::run(const std::string& out_dir, const SftEvents& ev) {
  if (!out_dir.empty()) fs::create_directories(out_dir);
  EvalResult last;
  auto eval_now = [&] {
    last = evaluate(learner_->shared_model(), *task_, *setup_.tk, setup_.eos, cfg_.seed, cfg_.eval_problems,
                    setup_.max_new, exec_);
    last.step = step();
    if (ev.on_eval) ev.on_eval(last);
  };
  std::vector<Sequence> batch;
  while (step() < cfg_.steps) {
    const int64_t s = step();
    batch.clear();
    for (int64_t i = 0; i < cfg_.batch_size; ++i)
      batch.push_back(make_sft_sequence(
          *setup_.tk, task_->generate(Split::Train, cfg_.seed, static_cast<uint64_t>(s * cfg_.batch_size + i)),
          setup_.eos));
    const StepResult r = learner_->step(batch);
    if (ev.on_step) ev.on_step(step(), r);
    if (cfg_.eval_every > 0 && step() % cfg_.eval_every == 0 && step() < cfg_.steps && cfg_.eval_problems > 0)
      eval_now();
    if (cfg_.save_every > 0 && step() % cfg_.save_every == 0 && !out_dir.empty()) {
      const std::string dir = (fs::path(out_dir) / fmt::format("step-{:06d}", step())).string();
      save(dir);
      if (ev.on_save) ev.on_save(dir);
    }
  }
  if (cfg_.eval_problems > 0) eval_now();
  if (!out_dir.empty()) {
    const std::string dir = (fs::path(out_dir) / "final").string();
    save(dir);
    if (ev.on_save) ev.on_save(dir);
  }
  return last;
}

}  // namespace mxrl
