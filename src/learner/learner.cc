#include "learner/learner.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "kernels/ops/ops.h"
#include "kernels/ops/ops_backward.h"
#include "model/forward.h"
#include "util/clock.h"
#include "util/error.h"

namespace mxrl {

const SettingsTable<LearnerConfig>& learner_fields() {
  using L = LearnerConfig;
  static const SettingsTable<L> t = [] {
    SettingsTable<L> t = {
        setting_field<L>("micro_batch_tokens", "Token budget of a micro-batch (sequences are packed)",
                         &L::micro_batch_tokens)
            .min(1),
        setting_field<L>(
            "recipe.plan", "bf16, mxfp8 (or fp32, mxfp8-half, a plan .toml)",
            [](L & l) -> auto& { return l.recipe.plan; })
            .cli("recipe"),
        setting_field<L>(
            "recipe.hybrid", "MXFP8: E5M2 gradients (HYBRID)", [](L & l) -> auto& { return l.recipe.hybrid; }),
        setting_field<L>(
            "recipe.floor", "MXFP8: floor scale rule instead of rceil", [](L & l) -> auto& { return l.recipe.floor; }),
        setting_field<L>(
            "recipe.requant_every_microbatch",
            "Remake the weight quantizations every micro-batch (to measure their cost)",
            [](L & l) -> auto& { return l.recipe.requant_every_microbatch; }),
    };
    for (auto& f : setting_nest<L>(optim_fields(), &L::optim, "optim.")) t.push_back(std::move(f));
    t.push_back(setting_field<L>("aux_loss_coef", "MoE load-balancing loss coefficient", &L::aux_loss_coef));
    return t;
  }();
  return t;
}

int64_t Sequence::num_targets() const {
  int64_t n = 0;
  for (uint8_t t : target) n += t != 0;
  return n;
}

std::vector<std::vector<size_t>> pack_micro_batches(const std::vector<Sequence>& seqs, int64_t budget) {
  if (budget < 1) fail("micro-batch token budget must be positive, got {}", budget);
  std::vector<std::vector<size_t>> out;
  int64_t used = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t len = static_cast<int64_t>(seqs[i].tokens.size());
    if (out.empty() || used + len > budget) out.emplace_back(), used = 0;
    out.back().push_back(i);
    used += len;
  }
  return out;
}

PrecisionPlan Recipe::precision_plan() const {
  PrecisionPlan p = PrecisionPlan::resolve(plan);
  if (floor) {
    auto set = [](LinearPrecision& lp) {
      if (lp.precision == Precision::MXFP8) lp.rule = ScaleRule::Floor;
    };
    set(p.decoder), set(p.router), set(p.lm_head);
    for (PlanOverride& o : p.overrides) set(o.precision);
    p.name += "+floor";
  }
  if (p.fp8_kv_cache) fail("recipe {}: the learner does not train with an FP8 KV cache", plan);
  return p;
}

Learner::Learner(ParamTable masters, LearnerConfig cfg, const Exec& exec)
    : params_(std::move(masters)),
      cfg_(std::move(cfg)),
      plan_(cfg_.recipe.precision_plan()),
      exec_(exec),
      opt_(params_, cfg_.optim) {
  if (cfg_.micro_batch_tokens < 1) fail("micro_batch_tokens must be positive, got {}", cfg_.micro_batch_tokens);
}

void Learner::prepare(PhaseTimes* times) {
  Exec ex = exec_;
  ex.times = times;
  PhaseTimer t(times, Phase::WeightQuant);
  model_ = std::make_shared<const Model>(params_, plan_, ex);
  ex.times = nullptr;  // counted above
  bw_ = BackwardWeights::prepare(params_, plan_, ex);
}

const Model& Learner::model() {
  if (!model_) prepare(nullptr);
  return *model_;
}

std::shared_ptr<const Model> Learner::shared_model() {
  if (!model_) prepare(nullptr);
  return model_;
}

namespace {
void check_sequence(const Sequence& s, const ModelConfig& c, size_t i) {
  if (s.tokens.empty()) fail("sequences[{}]: empty", i);
  if (s.target.size() != s.tokens.size())
    fail("sequences[{}]: {} tokens but {} target flags", i, s.tokens.size(), s.target.size());
  if (s.target[0]) fail("sequences[{}]: the first token cannot be a target", i);
  if (!s.weight.empty() && s.weight.size() != s.tokens.size())
    fail("sequences[{}]: {} tokens but {} loss weights", i, s.tokens.size(), s.weight.size());
  for (size_t t = 0; t < s.weight.size(); ++t)
    if (s.target[t] && !std::isfinite(s.weight[t])) fail("sequences[{}]: loss weight [{}] is {}", i, t, s.weight[t]);
  if (static_cast<int64_t>(s.tokens.size()) > c.max_position_embeddings)
    fail("sequences[{}]: {} tokens exceed max_position_embeddings {}", i, s.tokens.size(), c.max_position_embeddings);
}

// One micro-batch as a whole-sequence TokenBatch in a fresh cache.
TokenBatch make_batch(const std::vector<Sequence>& seqs, const std::vector<size_t>& idx, KvCache& cache) {
  TokenBatch b;
  for (size_t i : idx) {
    const int slot = cache.add_sequence();
    for (size_t p = 0; p < seqs[i].tokens.size(); ++p) b.add(seqs[i].tokens[p], slot, static_cast<int64_t>(p));
  }
  return b;
}
}  // namespace

namespace {
void check_temperature(float t) {
  if (!(t > 0.0f) || !std::isfinite(t)) fail("temperature must be positive and finite, got {}", t);
}
// logits[rows, n] /= t in place, each element divided in FP32 as the sampler does.
void divide_rows(float* logits, int64_t count, float t) {
  if (t == 1.0f) return;
  for (int64_t i = 0; i < count; ++i) logits[i] = logits[i] / t;
}
}  // namespace

GradTree::GradTree(int64_t m, int ranks) : leaves(m) {
  if (ranks < 1) fail("gradient tree: {} ranks", ranks);
  while (width < m) width *= 2;
  int64_t r = 1;
  while (r < ranks) r *= 2;
  roots = std::min(width, r);
}

std::pair<int64_t, int64_t> GradTree::roots_of(int rank, int ranks) const {
  return {roots * rank / ranks, roots * (rank + 1) / ranks};
}

std::pair<int64_t, int64_t> GradTree::leaves_of(int64_t root) const {
  const int64_t per = width / roots;
  return {std::min(leaves, root * per), std::min(leaves, (root + 1) * per)};
}

namespace {
void add_into(std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) fail("gradient tree: adding {} values to {}", b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = a[i] + b[i];
}
}  // namespace

void PairwiseSum::add(std::vector<float> g) {
  stack_.emplace_back(std::move(g), 1);
  ++count_;
  // Merge while the top two cover equal, aligned runs (the binary counter).
  while (stack_.size() >= 2 && stack_[stack_.size() - 2].second == stack_.back().second) {
    auto right = std::move(stack_.back());
    stack_.pop_back();
    add_into(stack_.back().first, right.first);
    stack_.back().second *= 2;
  }
}

std::vector<float> PairwiseSum::finish() {
  if (stack_.empty()) return {};
  // The runs left are the padded tree's present subtrees, largest first: each
  // absent sibling passes its partner up unchanged, so sum right to left.
  std::vector<float> right = std::move(stack_.back().first);
  stack_.pop_back();
  while (!stack_.empty()) {
    std::vector<float> left = std::move(stack_.back().first);
    stack_.pop_back();
    add_into(left, right);
    right = std::move(left);
  }
  count_ = 0;
  return right;
}

double Learner::loss_and_grads(const std::vector<Sequence>& batch, std::vector<float>& grads, StepResult* info,
                               float temperature) {
  std::vector<double> mb_loss, mb_aux;
  StepResult r;
  auto roots = shard_grads(batch, {}, mb_loss, mb_aux, &r, temperature);
  grads = std::move(roots.at(0).second);
  if (info) *info = r;
  return r.loss;
}

std::vector<std::pair<int64_t, std::vector<float>>> Learner::shard_grads(const std::vector<Sequence>& batch,
                                                                         GradShard shard, std::vector<double>& mb_loss,
                                                                         std::vector<double>& mb_aux, StepResult* info,
                                                                         float temperature) {
  check_temperature(temperature);
  if (shard.ranks < 1 || shard.rank < 0 || shard.rank >= shard.ranks)
    fail("gradient shard {} of {}", shard.rank, shard.ranks);
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& c = params_.config();
  StepResult r;
  for (size_t i = 0; i < batch.size(); ++i) {
    check_sequence(batch[i], c, i);
    r.tokens += static_cast<int64_t>(batch[i].tokens.size());
    r.targets += batch[i].num_targets();
  }
  if (r.targets == 0) fail("the batch has no target tokens");
  const bool weighted = !batch[0].weight.empty();
  for (size_t i = 1; i < batch.size(); ++i)
    if (batch[i].weight.empty() == weighted)
      fail("sequences[{}]: loss weights on some sequences of the batch but not on others", i);
  r.times.timeline = timeline_;
  Exec ex = exec_;
  ex.times = &r.times;
  const auto mbs = pack_micro_batches(batch, cfg_.micro_batch_tokens);
  r.micro_batches = static_cast<int64_t>(mbs.size());
  const GradTree tree(r.micro_batches, shard.ranks);
  const auto [root_begin, root_end] = tree.roots_of(shard.rank, shard.ranks);
  mb_loss.assign(mbs.size(), std::numeric_limits<double>::quiet_NaN());
  mb_aux.assign(mbs.size(), std::numeric_limits<double>::quiet_NaN());
  const float dl = -1.0f / static_cast<float>(r.targets);
  BackwardOptions bo;
  bo.grad_elem = cfg_.recipe.grad_elem();
  bo.aux_loss_coef = c.num_experts > 0 ? cfg_.aux_loss_coef : 0.0;
  std::vector<float> logits, dlogits, dlogp, lp;
  std::vector<int32_t> targets;
  std::vector<uint8_t> scored;
  std::vector<std::pair<int64_t, std::vector<float>>> out;
  for (int64_t root = root_begin; root < root_end; ++root) {
    const auto [leaf_begin, leaf_end] = tree.leaves_of(root);
    if (leaf_begin >= leaf_end) continue;
    PairwiseSum sum;
    for (int64_t mb = leaf_begin; mb < leaf_end; ++mb) {
      // The weights are quantized once per step (at the first micro-batch
      // this rank computes), or per micro-batch with requant_every_microbatch.
      if (!model_ || cfg_.recipe.requant_every_microbatch) prepare(&r.times);
      std::vector<float> grads;
      {
        PhaseTimer t(&r.times, Phase::Alloc);
        grads.assign(params_.numel(), 0.0f);
      }
      std::optional<KvCache> cache_slot;
      {
        PhaseTimer t(&r.times, Phase::Alloc);
        cache_slot.emplace(c);
      }
      KvCache& cache = *cache_slot;
      const TokenBatch b = make_batch(batch, mbs[mb], cache);
      const int64_t n = b.size(), V = c.vocab_size;
      logits.resize(n * V);
      forward(*model_, cache, b, logits.data(), ex, nullptr, &trace_, &workspace_);
      divide_rows(logits.data(), n * V, temperature);
      // Row i predicts the next token of its sequence when that one is a target.
      targets.assign(n, 0), dlogp.assign(n, 0.0f), lp.assign(n, 0.0f), scored.assign(n, 0);
      int64_t row = 0;
      for (size_t i : mbs[mb]) {
        const Sequence& s = batch[i];
        for (size_t p = 0; p + 1 < s.tokens.size(); ++p)
          if (s.target[p + 1])
            targets[row + p] = s.tokens[p + 1], scored[row + p] = 1, dlogp[row + p] = weighted ? -s.weight[p + 1] : dl;
        row += static_cast<int64_t>(s.tokens.size());
      }
      double loss = 0;
      for (int64_t i = 0; i < n; ++i)
        if (scored[i]) {
          log_softmax_gather(&lp[i], &logits[i * V], &targets[i], 1, V, exec_);
          loss += weighted ? static_cast<double>(dlogp[i]) * lp[i] : -lp[i];
        }
      mb_loss[mb] = loss;
      dlogits.resize(n * V);
      log_softmax_gather_backward(dlogits.data(), logits.data(), targets.data(), dlogp.data(), n, V, exec_);
      divide_rows(dlogits.data(), n * V, temperature);  // d(logits / T) / d logits = 1 / T
      bo.aux_loss_weight = static_cast<double>(n) / static_cast<double>(r.tokens);
      mb_aux[mb] = bo.aux_loss_weight * backward(*model_, params_, bw_, cache, b, trace_, dlogits.data(), grads.data(),
                                                 bo, ex, &backward_workspace_);
      PhaseTimer t(&r.times, Phase::Alloc);
      sum.add(std::move(grads));
    }
    PhaseTimer t(&r.times, Phase::Alloc);
    out.emplace_back(root, sum.finish());
  }
  for (size_t mb = 0; mb < mbs.size(); ++mb)
    if (!std::isnan(mb_loss[mb])) r.loss += mb_loss[mb], r.aux_loss += mb_aux[mb];
  if (!weighted) r.loss /= static_cast<double>(r.targets);
  r.seconds = seconds_since(t0);
  if (info) *info = r;
  return out;
}

OptimStats Learner::apply_grads(const std::vector<float>& grads) {
  const OptimStats s = opt_.step(params_, grads, exec_);
  model_.reset();
  return s;
}

StepResult Learner::step(const std::vector<Sequence>& batch, float temperature) {
  const auto t0 = std::chrono::steady_clock::now();
  StepResult r;
  std::vector<float> grads;
  loss_and_grads(batch, grads, &r, temperature);
  const auto t1 = std::chrono::steady_clock::now();
  {
    PhaseTimer t(&r.times, Phase::Optimizer);
    r.optim = opt_.step(params_, grads, exec_);
  }
  r.optimizer_seconds = seconds_since(t1);
  model_.reset();  // the masters changed: new forward weights on next use
  const auto t2 = std::chrono::steady_clock::now();
  r.seconds = std::chrono::duration<double>(t2 - t0).count();
  if (timeline_) timeline_->span("step", t0, t2);
  return r;
}

std::vector<std::vector<float>> Learner::logprobs(const std::vector<Sequence>& seqs, const LogprobOptions& opt) {
  check_temperature(opt.temperature);
  const ModelConfig& c = params_.config();
  for (size_t i = 0; i < seqs.size(); ++i) check_sequence(seqs[i], c, i);
  if (!model_) prepare(nullptr);
  std::vector<std::vector<float>> out(seqs.size());
  std::vector<float> logits;
  for (const auto& idx : pack_micro_batches(seqs, cfg_.micro_batch_tokens)) {
    KvCache cache(c);
    const TokenBatch b = make_batch(seqs, idx, cache);
    logits.resize(b.size() * c.vocab_size);
    forward(*model_, cache, b, logits.data(), exec_, nullptr, &trace_, &workspace_);  // the training forward, exactly
    int64_t row = 0;
    for (size_t i : idx) {
      const Sequence& s = seqs[i];
      for (size_t p = 0; p + 1 < s.tokens.size(); ++p)
        if (s.target[p + 1]) {
          float* x = &logits[(row + p) * c.vocab_size];
          if (opt.on_row) opt.on_row(i, out[i].size(), x);
          divide_rows(x, c.vocab_size, opt.temperature);
          float lp;
          log_softmax_gather(&lp, x, &s.tokens[p + 1], 1, c.vocab_size, exec_);
          out[i].push_back(lp);
        }
      row += static_cast<int64_t>(s.tokens.size());
    }
  }
  return out;
}

}  // namespace mxrl
