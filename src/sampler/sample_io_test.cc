#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "sampler/sample_io.h"
#include "util/error.h"

namespace mxrl {
namespace {

TEST(SampleIo, RequestsAndSamplesRoundTripBitForBit) {
  GenerationRequest q;
  q.id = 7, q.prompt = {1, 2, 3}, q.n = 4, q.max_new_tokens = 9, q.sampling.temperature = 0.7f;
  q.sampling.top_p = 0.9f, q.sampling.top_k = 5, q.stop_tokens = {0}, q.seed = 11;
  GeneratedSample g;
  g.request = 7, g.index = 2, g.tokens = {4, 5}, g.logprobs = {-0.0f, std::nanf("1")};
  g.finish = FinishReason::Stop, g.version = 3, g.token_versions = {3, 3}, g.logits = {1.5f, -2.25f, 1e-40f};
  ByteWriter w;
  write_requests(w, {q, q});
  write_samples(w, {g});
  ByteReader r(w.bytes(), "test");
  const auto qs = read_requests(r);
  const auto gs = read_samples(r);
  r.expect_done();
  ASSERT_EQ(qs.size(), 2u);
  EXPECT_EQ(qs[1].prompt, q.prompt);
  EXPECT_EQ(qs[1].sampling.top_k, 5);
  EXPECT_EQ(qs[1].seed, 11u);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_EQ(gs[0].tokens, g.tokens);
  EXPECT_EQ(0, std::memcmp(gs[0].logprobs.data(), g.logprobs.data(), 8));
  EXPECT_EQ(0, std::memcmp(gs[0].logits.data(), g.logits.data(), 12));
  EXPECT_EQ(gs[0].finish, FinishReason::Stop);
  EXPECT_EQ(gs[0].version, 3u);
}

TEST(SampleIo, TruncatedOrInconsistentMessagesAreRefused) {
  GeneratedSample g;
  g.tokens = {1, 2}, g.logprobs = {0, 0}, g.token_versions = {0, 0};
  ByteWriter w;
  write_samples(w, {g});
  std::vector<std::byte> b = w.bytes();
  for (size_t cut : {size_t{0}, size_t{5}, b.size() - 1}) {
    ByteReader r(std::span<const std::byte>(b.data(), cut), "samples from rank 1");
    EXPECT_THROW(read_samples(r), Error) << cut;
  }
  g.logprobs.pop_back();
  ByteWriter w2;
  write_samples(w2, {g});
  ByteReader r2(w2.bytes(), "x");
  try {
    read_samples(r2);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 tokens but 1 log-probs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mxrl
