#include "sampler/engine.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "util/error.h"

namespace mxrl {

const char* finish_reason_name(FinishReason r) { return r == FinishReason::Stop ? "stop" : "length"; }

Engine::Engine(std::shared_ptr<const Model> model, uint64_t version, EngineOptions opt, const Exec& exec)
    : model_(std::move(model)), version_(version), opt_(opt), exec_(exec), cache_(model_->config()) {
  if (opt_.kv_budget_tokens < 1) fail("engine: kv budget must be positive");
  if (opt_.max_prefill_tokens < 1) fail("engine: max_prefill_tokens must be positive");
}

int64_t Engine::submit(const GenerationRequest& r) {
  const ModelConfig& c = model_->config();
  const int64_t id = r.id >= 0 ? r.id : static_cast<int64_t>(requests_.size());
  r.sampling.validate();
  if (r.prompt.empty()) fail("request {}: empty prompt", id);
  if (r.n < 1) fail("request {}: n must be at least 1", id);
  if (r.max_new_tokens < 1) fail("request {}: max_new_tokens must be at least 1", id);
  for (int32_t t : r.prompt)
    if (t < 0 || t >= c.vocab_size) fail("request {}: token id {} outside the vocabulary [0, {})", id, t, c.vocab_size);
  for (int32_t t : r.stop_tokens)
    if (t < 0 || t >= c.vocab_size) fail("request {}: stop token id {} outside the vocabulary", id, t);
  const int64_t len = static_cast<int64_t>(r.prompt.size());
  if (len >= c.max_position_embeddings)
    fail("request {}: prompt of {} tokens leaves no room in max_position_embeddings {}", id, len, c.max_position_embeddings);
  const int64_t need = std::min(len + r.max_new_tokens, c.max_position_embeddings);
  if (need > opt_.kv_budget_tokens)
    fail("request {}: needs {} cache positions, more than the whole budget of {}", id, need, opt_.kv_budget_tokens);
  if (len > opt_.max_prefill_tokens)
    fail("request {}: prompt of {} tokens exceeds max_prefill_tokens {}", id, len, opt_.max_prefill_tokens);
  const int64_t sub = static_cast<int64_t>(requests_.size());
  requests_.push_back(r);
  requests_.back().id = id;
  for (int64_t i = 0; i < r.n; ++i) {
    Seq s;
    s.request = sub;
    s.index = i;
    s.reserved = need;
    s.out.request = id;
    s.out.index = i;
    waiting_.push_back(std::move(s));
  }
  return id;
}

void Engine::stage(std::shared_ptr<const Model> next, uint64_t version) {
  if (!next) fail("engine: staged model is null");
  if (next->config().to_json() != model_->config().to_json())
    fail("engine: staged weights are for a different model config");
  staged_ = std::move(next);
  staged_version_ = version;
}

void Engine::stage(const ParamTable& params, const PrecisionPlan& plan, uint64_t version) {
  // Build completely before touching any state: a failure leaves everything as it was.
  auto next = std::make_shared<const Model>(params, plan, exec_);
  stage(std::move(next), version);
}

void Engine::stage(const WeightShipment& shipment, uint64_t version) {
  auto next = std::make_shared<const Model>(Model::from_shipment(model_->config(), model_->plan(), shipment, exec_));
  stage(std::move(next), version);
}

void Engine::maybe_swap() {
  if (!staged_ || !running_.empty()) return;
  model_ = std::move(staged_);
  version_ = staged_version_;
  cache_ = KvCache(model_->config());  // nothing derived from the old weights survives
  ++epoch_;
}

void Engine::admit(std::vector<Seq*>& prefill) {
  int64_t tokens = 0;
  while (!waiting_.empty() && !staged_) {
    Seq& s = waiting_.front();
    const int64_t len = static_cast<int64_t>(requests_[s.request].prompt.size());
    if (reserved_ + s.reserved > opt_.kv_budget_tokens) break;
    if (tokens + len > opt_.max_prefill_tokens) break;
    tokens += len;
    reserved_ += s.reserved;
    s.slot = cache_.add_sequence();
    running_.push_back(std::make_unique<Seq>(std::move(s)));
    waiting_.pop_front();
    prefill.push_back(running_.back().get());
  }
}

std::vector<GeneratedSample> Engine::step() {
  maybe_swap();
  std::vector<Seq*> prefill;
  admit(prefill);
  std::vector<GeneratedSample> done;
  if (running_.empty()) return done;
  // One forward call: whole prompts of the newly admitted samples, the last
  // token of every other one; logits only at each sample's last row.
  TokenBatch b;
  std::vector<int64_t> rows;
  std::vector<Seq*> order;
  for (auto& sp : running_) {
    Seq& s = *sp;
    if (!s.prefilled) {
      const auto& p = requests_[s.request].prompt;
      for (size_t t = 0; t < p.size(); ++t) b.add(p[t], s.slot, static_cast<int64_t>(t));
      s.prefilled = true;
    } else {
      b.add(s.out.tokens.back(), s.slot, cache_.length(s.slot));
    }
    rows.push_back(b.size() - 1);
    order.push_back(&s);
  }
  const int64_t V = model_->config().vocab_size;
  logits_.resize(rows.size() * V);
  forward(*model_, cache_, b, logits_.data(), exec_, &rows, nullptr, &workspace_);
  std::vector<bool> finished(running_.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    Seq& s = *order[i];
    const GenerationRequest& r = requests_[s.request];
    const int64_t step = static_cast<int64_t>(s.out.tokens.size());
    const double u = sample_uniform(r.seed, static_cast<uint64_t>(r.id), static_cast<uint64_t>(s.index),
                                    static_cast<uint64_t>(step));
    const Sampled tok = sample_token(&logits_[i * V], V, r.sampling, u, scratch_);
    s.out.tokens.push_back(tok.token);
    s.out.logprobs.push_back(tok.logprob);
    const int64_t total = static_cast<int64_t>(r.prompt.size() + s.out.tokens.size());
    if (std::find(r.stop_tokens.begin(), r.stop_tokens.end(), tok.token) != r.stop_tokens.end()) {
      s.out.finish = FinishReason::Stop;
      finished[i] = true;
    } else if (static_cast<int64_t>(s.out.tokens.size()) >= r.max_new_tokens ||
               total >= model_->config().max_position_embeddings) {
      s.out.finish = FinishReason::Length;
      finished[i] = true;
    }
  }
  // Retire finished samples (in running order), freeing their cache.
  std::vector<std::unique_ptr<Seq>> still;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (!finished[i]) {
      still.push_back(std::move(running_[i]));
      continue;
    }
    Seq& s = *running_[i];
    s.out.version = version_;
    cache_.release(s.slot);
    reserved_ -= s.reserved;
    done.push_back(std::move(s.out));
  }
  running_.swap(still);
  return done;
}

std::vector<GeneratedSample> Engine::run() {
  std::vector<GeneratedSample> all;
  while (!idle() || staged_) {
    auto d = step();
    for (auto& s : d) all.push_back(std::move(s));
    if (idle() && staged_) maybe_swap();
  }
  return all;
}

}  // namespace mxrl
