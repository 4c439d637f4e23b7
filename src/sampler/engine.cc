#include "sampler/engine.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

const char* finish_reason_name(FinishReason r) { return r == FinishReason::Stop ? "stop" : "length"; }

Engine::Engine(std::shared_ptr<const Model> model, uint64_t version, EngineOptions opt, const Exec& exec,
               std::shared_ptr<const EngineHooks> hooks)
    : model_(std::move(model)),
      version_(version),
      opt_(opt),
      exec_(exec),
      hooks_(std::move(hooks)),
      cache_(model_->config()) {
  if (opt_.kv_budget_tokens < 1) fail("engine: kv budget must be positive");
  if (opt_.max_prefill_tokens < 1) fail("engine: max_prefill_tokens must be positive");
  plan_ = {model_, version_, epoch_};
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
    fail("request {}: prompt of {} tokens leaves no room in max_position_embeddings {}", id, len,
         c.max_position_embeddings);
  const int64_t need = std::min(len + r.max_new_tokens, c.max_position_embeddings);
  if (need > opt_.kv_budget_tokens)
    fail("request {}: needs {} cache positions, more than the whole budget of {}", id, need, opt_.kv_budget_tokens);
  if (len > opt_.max_prefill_tokens)
    fail("request {}: prompt of {} tokens exceeds max_prefill_tokens {}", id, len, opt_.max_prefill_tokens);
  const int64_t sub = static_cast<int64_t>(requests_.size());
  requests_.push_back(r);
  requests_.back().id = id;
  waiting_prompts_[r.prompt] += r.n;
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

bool Engine::swap_now() {
  if (!staged_) return false;
  const uint64_t v = staged_version_;
  EngineSwap sw;
  sw.forward = opt_.forward;
  if (hooks_) hooks_->on_swap(v, sw);
  if (!running_.empty() && sw.drain) return false;
  if (sw.drop_prefixes) drop_prefixes();
  if (running_.empty() && prefix_.empty())
    cache_ = KvCache(staged_->config());  // nothing derived from the old weights survives
  ++epoch_;
  model_ = std::move(staged_);
  staged_ = nullptr;
  if (sw.rebind_plan) plan_ = {model_, v, epoch_};
  opt_.forward = sw.forward;
  version_ = v;  // reported only once everything is rebuilt
  return true;
}

std::vector<DerivedObject> Engine::derived_objects() const {
  std::vector<DerivedObject> out;
  out.push_back({"plan", "decode plan", plan_.version, plan_.epoch});
  for (const auto& [prompt, e] : prefix_)
    out.push_back({"prefix", fmt::format("prompt of {} tokens in slot {}", e.len, e.slot), e.version, e.epoch});
  for (const auto& s : running_)
    out.push_back({"kv", fmt::format("request {} sample {} in slot {}", s->out.request, s->out.index, s->slot),
                   s->kv_version, s->kv_epoch});
  return out;
}

std::vector<std::vector<float>> Engine::score(const std::vector<ScoreRequest>& reqs) const {
  return score_sequences(*plan_.model, reqs, {}, exec_, opt_.forward);
}

std::vector<float> Engine::sequence_logits(const std::vector<int32_t>& tokens) const {
  return mxrl::sequence_logits(*plan_.model, tokens, exec_, opt_.forward);
}

Engine::PrefixEntry* Engine::find_prefix(const std::vector<int32_t>& prompt) {
  auto it = prefix_.find(prompt);
  return it == prefix_.end() ? nullptr : &it->second;
}

Engine::PrefixEntry& Engine::new_prefix(const std::vector<int32_t>& prompt) {
  const auto it = prefix_.try_emplace(prompt).first;
  PrefixEntry& e = it->second;
  e.prompt = &it->first;
  e.slot = cache_.add_sequence();
  e.len = static_cast<int64_t>(prompt.size());
  e.version = plan_.version;
  e.epoch = plan_.epoch;
  reserved_ += e.len;
  return e;
}

void Engine::release_unused_prefixes() {
  if (hooks_ && hooks_->keeps_prefixes()) return;
  for (auto it = prefix_.begin(); it != prefix_.end();) {
    if (waiting_prompts_.count(it->first)) {
      ++it;
      continue;
    }
    cache_.release(it->second.slot);
    reserved_ -= it->second.len;
    it = prefix_.erase(it);
  }
}

void Engine::drop_prefixes() {
  for (const auto& [prompt, e] : prefix_) {
    cache_.release(e.slot);
    reserved_ -= e.len;
  }
  prefix_.clear();
}

// Admits waiting samples in order while the budget and the prefill cap allow.
// A sample whose prompt has a live entry costs its own reservation; one that
// creates the entry also its prompt's length (budget and prefill); one whose
// entry cannot fit beside it prefills its own slot. When nothing runs and the
// next sample does not fit, the prefix entries are dropped (recomputed later).
void Engine::admit(std::vector<PrefixEntry*>& fresh) {
  int64_t tokens = 0;
  while (!waiting_.empty() && !staged_) {
    Seq& s = waiting_.front();
    const std::vector<int32_t>& prompt = requests_[s.request].prompt;
    const int64_t len = static_cast<int64_t>(prompt.size());
    PrefixEntry* e = opt_.prefix_sharing ? find_prefix(prompt) : nullptr;
    // A prompt no other waiting sample shares gets no entry (it would be
    // freed right after this sample's copy), unless the hooks keep entries.
    const bool alone = waiting_prompts_.at(prompt) == 1 && !(hooks_ && hooks_->keeps_prefixes());
    const bool share = opt_.prefix_sharing && (e || (!alone && len + s.reserved <= opt_.kv_budget_tokens));
    const int64_t cost = s.reserved + (share && !e ? len : 0);
    const int64_t prefill = share && e ? 0 : len;
    if (reserved_ + cost > opt_.kv_budget_tokens && running_.empty() && !prefix_.empty()) {
      drop_prefixes();
      continue;
    }
    if (reserved_ + cost > opt_.kv_budget_tokens || tokens + prefill > opt_.max_prefill_tokens) break;
    tokens += prefill;
    reserved_ += s.reserved;
    s.slot = cache_.add_sequence();
    cache_.reserve(s.slot, s.reserved);  // its whole length now: no step regrows it (KvCache: pages come as written)
    s.stage = share ? Stage::Attach : Stage::Prefill;
    if (share && !e) {
      e = &new_prefix(prompt);
      fresh.push_back(e);
    }
    s.prefix = e;
    auto w = waiting_prompts_.find(prompt);
    if (--w->second == 0) waiting_prompts_.erase(w);
    running_.push_back(std::make_unique<Seq>(std::move(s)));
    waiting_.pop_front();
  }
}

// The one forward call of the step — whole prompts of the fresh prefix
// entries and of samples prefilling their own slot, the last token of every
// decoding sample; logits only at last rows — then the prefix copies. Returns
// the logits row each running sample draws from, in running order.
std::vector<Engine::Row> Engine::compute_rows(const std::vector<PrefixEntry*>& fresh) {
  TokenBatch b;
  std::vector<int64_t> rows;
  auto add_prompt = [&](const std::vector<int32_t>& p, int slot) {
    for (size_t t = 0; t < p.size(); ++t) b.add(p[t], slot, static_cast<int64_t>(t));
    rows.push_back(b.size() - 1);
  };
  for (PrefixEntry* e : fresh) add_prompt(*e->prompt, e->slot);
  for (auto& sp : running_) {
    Seq& s = *sp;
    if (s.stage == Stage::Prefill) add_prompt(requests_[s.request].prompt, s.slot);
    if (s.stage == Stage::Decode) {
      b.add(s.out.tokens.back(), s.slot, cache_.length(s.slot));
      rows.push_back(b.size() - 1);
    }
  }
  const int64_t V = plan_.model->config().vocab_size;
  logits_.resize(rows.size() * V);
  if (b.size() > 0) forward(*plan_.model, cache_, b, logits_.data(), exec_, &rows, nullptr, &workspace_, opt_.forward);
  for (size_t i = 0; i < fresh.size(); ++i) fresh[i]->logits.assign(&logits_[i * V], &logits_[(i + 1) * V]);
  std::vector<Row> out;
  size_t next = fresh.size();
  for (auto& sp : running_) {
    Seq& s = *sp;
    if (s.stage == Stage::Attach) {
      out.push_back(attach(s));
    } else {
      if (s.stage == Stage::Prefill) s.kv_version = plan_.version, s.kv_epoch = plan_.epoch;
      out.push_back({&logits_[next++ * V], plan_.version});
    }
    s.stage = Stage::Decode;
  }
  return out;
}

Engine::Row Engine::attach(Seq& s) {
  const PrefixEntry& e = *s.prefix;
  if ((e.version != plan_.version || e.epoch != plan_.epoch) && !(hooks_ && hooks_->keeps_prefixes()))
    fail("engine: internal: prefix entry of version {} (epoch {}) used under version {} (epoch {})", e.version, e.epoch,
         plan_.version, plan_.epoch);
  cache_.copy_prefix(e.slot, s.slot, e.len);
  s.kv_version = e.version;
  s.kv_epoch = e.epoch;
  s.prefix = nullptr;
  return {e.logits.data(), e.version};
}

// The next token of s from its logits row; a pure function of the request's
// seed, the sample and the step (safe to call for many samples at once).
Sampled Engine::draw(const Seq& s, const Row& row, std::vector<float>& scratch) const {
  const GenerationRequest& r = requests_[s.request];
  const int64_t step = static_cast<int64_t>(s.out.tokens.size());
  const double u =
      sample_uniform(r.seed, static_cast<uint64_t>(r.id), static_cast<uint64_t>(s.index), static_cast<uint64_t>(step));
  return sample_token(row.logits, plan_.model->config().vocab_size, r.sampling, u, scratch);
}

bool Engine::record(Seq& s, const Row& row, const Sampled& tok) {
  const GenerationRequest& r = requests_[s.request];
  const int64_t V = plan_.model->config().vocab_size;
  s.out.tokens.push_back(tok.token);
  s.out.logprobs.push_back(tok.logprob);
  s.out.token_versions.push_back(row.version);
  if (opt_.record_logits) s.out.logits.insert(s.out.logits.end(), row.logits, row.logits + V);
  const int64_t total = static_cast<int64_t>(r.prompt.size() + s.out.tokens.size());
  if (std::find(r.stop_tokens.begin(), r.stop_tokens.end(), tok.token) != r.stop_tokens.end()) {
    s.out.finish = FinishReason::Stop;
    return true;
  }
  s.out.finish = FinishReason::Length;
  return static_cast<int64_t>(s.out.tokens.size()) >= r.max_new_tokens ||
         total >= plan_.model->config().max_position_embeddings;
}

// Retires finished samples (in running order), freeing their cache.
std::vector<GeneratedSample> Engine::retire(const std::vector<bool>& finished) {
  std::vector<GeneratedSample> done;
  std::vector<std::unique_ptr<Seq>> still;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (!finished[i]) {
      still.push_back(std::move(running_[i]));
      continue;
    }
    Seq& s = *running_[i];
    s.out.version = plan_.version;
    for (uint64_t v : s.out.token_versions)
      if (v != s.out.version && !(hooks_ && hooks_->mixes_versions()))
        fail("engine: internal: sample {} of request {} mixes versions {} and {}", s.out.index, s.out.request, v,
             s.out.version);
    cache_.release(s.slot);
    reserved_ -= s.reserved;
    done.push_back(std::move(s.out));
  }
  running_.swap(still);
  return done;
}

std::vector<GeneratedSample> Engine::step() {
  swap_now();
  std::vector<PrefixEntry*> fresh;
  admit(fresh);
  std::vector<GeneratedSample> done;
  if (running_.empty()) return done;
  const std::vector<Row> rows = compute_rows(fresh);
  // The draws (each a softmax over the vocabulary: at batch 32 on the
  // 0.6B shape, 16 ms of a step on one thread) in parallel, in fixed chunks
  // with a scratch each; then recorded in running order.
  const int64_t n = static_cast<int64_t>(running_.size());
  const int64_t chunks = std::min<int64_t>(n, exec_.pool ? exec_.pool->size() : 1);
  if (static_cast<int64_t>(scratch_.size()) < chunks) scratch_.resize(static_cast<size_t>(chunks));
  std::vector<Sampled> drawn(running_.size());
  parallel_for(exec_.pool, chunks, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t i = c * n / chunks; i < (c + 1) * n / chunks; ++i)
        drawn[i] = draw(*running_[i], rows[i], scratch_[c]);
  });
  std::vector<bool> finished(running_.size(), false);
  for (size_t i = 0; i < running_.size(); ++i) finished[i] = record(*running_[i], rows[i], drawn[i]);
  release_unused_prefixes();  // after the copies; the rows above are no longer read
  return retire(finished);
}

std::vector<GeneratedSample> Engine::run() {
  std::vector<GeneratedSample> all;
  while (!idle() || staged_) {
    auto d = step();
    for (auto& s : d) all.push_back(std::move(s));
    if (idle()) swap_now();
  }
  return all;
}

}  // namespace mxrl
