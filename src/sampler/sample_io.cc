#include "sampler/sample_io.h"

#include "util/error.h"

namespace mxrl {

void write_requests(ByteWriter& w, const std::vector<GenerationRequest>& reqs) {
  w.put<uint64_t>(reqs.size());
  for (const GenerationRequest& q : reqs) {
    w.put<int64_t>(q.id);
    w.put_vec(q.prompt);
    w.put<int64_t>(q.n);
    w.put<int64_t>(q.max_new_tokens);
    w.put<float>(q.sampling.temperature);
    w.put<float>(q.sampling.top_p);
    w.put<int64_t>(q.sampling.top_k);
    w.put_vec(q.stop_tokens);
    w.put<uint64_t>(q.seed);
  }
}

std::vector<GenerationRequest> read_requests(ByteReader& r) {
  const uint64_t n = r.get<uint64_t>();
  if (n > (uint64_t{1} << 32)) fail("requests: count {} is out of range", n);
  std::vector<GenerationRequest> out;  // grown as they are read: a count is not trusted with memory
  for (uint64_t i = 0; i < n; ++i) {
    GenerationRequest& q = out.emplace_back();
    q.id = r.get<int64_t>();
    q.prompt = r.get_vec<int32_t>();
    q.n = r.get<int64_t>();
    q.max_new_tokens = r.get<int64_t>();
    q.sampling.temperature = r.get<float>();
    q.sampling.top_p = r.get<float>();
    q.sampling.top_k = r.get<int64_t>();
    q.stop_tokens = r.get_vec<int32_t>();
    q.seed = r.get<uint64_t>();
  }
  return out;
}

void write_samples(ByteWriter& w, const std::vector<GeneratedSample>& samples) {
  w.put<uint64_t>(samples.size());
  for (const GeneratedSample& g : samples) {
    w.put<int64_t>(g.request);
    w.put<int64_t>(g.index);
    w.put_vec(g.tokens);
    w.put_vec(g.logprobs);
    w.put<uint8_t>(g.finish == FinishReason::Stop ? 1 : 0);
    w.put<uint64_t>(g.version);
    w.put_vec(g.token_versions);
    w.put_vec(g.logits);
  }
}

std::vector<GeneratedSample> read_samples(ByteReader& r) {
  const uint64_t n = r.get<uint64_t>();
  if (n > (uint64_t{1} << 32)) fail("samples: count {} is out of range", n);
  std::vector<GeneratedSample> out;
  for (uint64_t i = 0; i < n; ++i) {
    GeneratedSample& g = out.emplace_back();
    g.request = r.get<int64_t>();
    g.index = r.get<int64_t>();
    g.tokens = r.get_vec<int32_t>();
    g.logprobs = r.get_vec<float>();
    const uint8_t f = r.get<uint8_t>();
    if (f > 1) fail("samples: finish reason {} is not 0 or 1", f);
    g.finish = f ? FinishReason::Stop : FinishReason::Length;
    g.version = r.get<uint64_t>();
    g.token_versions = r.get_vec<uint64_t>();
    g.logits = r.get_vec<float>();
    if (g.logprobs.size() != g.tokens.size() || g.token_versions.size() != g.tokens.size())
      fail("samples: sample {}/{} has {} tokens but {} log-probs and {} token versions", g.request, g.index,
           g.tokens.size(), g.logprobs.size(), g.token_versions.size());
  }
  return out;
}

}  // namespace mxrl
