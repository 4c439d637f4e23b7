#include "model/score.h"

#include "kernels/ops/ops.h"
#include "model/forward.h"
#include "util/error.h"

namespace mxrl {

std::vector<std::vector<float>> score_sequences(const Model& model, const std::vector<ScoreRequest>& reqs,
                                                const ScoreOptions& opt, const Exec& exec, const ForwardOptions& fo) {
  const ModelConfig& c = model.config();
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& r = reqs[i];
    if (r.prompt_len < 1 || r.prompt_len > static_cast<int64_t>(r.tokens.size()))
      fail("sequences[{}]: prompt_len {} must be in [1, {}]", i, r.prompt_len, r.tokens.size());
    if (static_cast<int64_t>(r.tokens.size()) > c.max_position_embeddings)
      fail("sequences[{}]: {} tokens exceed max_position_embeddings {}", i, r.tokens.size(), c.max_position_embeddings);
    for (int32_t t : r.tokens)
      if (t < 0 || t >= c.vocab_size) fail("sequences[{}]: token id {} out of range [0, {})", i, t, c.vocab_size);
  }
  std::vector<std::vector<float>> out(reqs.size());
  KvCache cache(c);
  std::vector<int> slot(reqs.size(), -1);
  std::vector<int64_t> done(reqs.size(), 0);  // tokens fed so far
  std::vector<float> logits;
  ForwardWorkspace workspace;
  size_t next = 0;
  // Feed the sequences in order, packing up to max_batch_tokens per call; the
  // last token of a sequence needs no logits but is fed anyway for simplicity.
  std::vector<size_t> active;
  while (next < reqs.size() || !active.empty()) {
    TokenBatch b;
    std::vector<std::pair<size_t, int64_t>> who;  // (request, position) per row
    auto feed = [&](size_t i) {
      const int64_t len = static_cast<int64_t>(reqs[i].tokens.size());
      int64_t take = len - done[i];
      if (opt.chunk > 0) take = std::min(take, opt.chunk);
      take = std::min(take, opt.max_batch_tokens - b.size());
      for (int64_t t = 0; t < take; ++t) {
        b.add(reqs[i].tokens[done[i] + t], slot[i], done[i] + t);
        who.emplace_back(i, done[i] + t);
      }
      done[i] += take;
    };
    for (size_t i : active)
      if (b.size() < opt.max_batch_tokens) feed(i);
    while (next < reqs.size() && b.size() < opt.max_batch_tokens) {
      slot[next] = cache.add_sequence();
      active.push_back(next);
      feed(next++);
    }
    logits.resize(b.size() * c.vocab_size);
    forward(model, cache, b, logits.data(), exec, nullptr, nullptr, &workspace, fo);
    for (int64_t r = 0; r < b.size(); ++r) {
      const auto [i, pos] = who[r];
      const auto& req = reqs[i];
      if (pos + 1 >= req.prompt_len && pos + 1 < static_cast<int64_t>(req.tokens.size())) {
        float lp;
        const int32_t target = req.tokens[pos + 1];
        log_softmax_gather(&lp, &logits[r * c.vocab_size], &target, 1, c.vocab_size, exec);
        out[i].push_back(lp);
      }
    }
    std::vector<size_t> still;
    for (size_t i : active)
      if (done[i] < static_cast<int64_t>(reqs[i].tokens.size())) still.push_back(i);
    active.swap(still);
  }
  return out;
}

std::vector<float> sequence_logits(const Model& model, const std::vector<int32_t>& tokens, const Exec& exec,
                                   const ForwardOptions& fo) {
  KvCache cache(model.config());
  const int s = cache.add_sequence();
  TokenBatch b;
  for (size_t t = 0; t < tokens.size(); ++t) b.add(tokens[t], s, static_cast<int64_t>(t));
  std::vector<float> logits(tokens.size() * model.config().vocab_size);
  forward(model, cache, b, logits.data(), exec, nullptr, nullptr, nullptr, fo);
  return logits;
}

}  // namespace mxrl
