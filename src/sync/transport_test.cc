// The chunked transport: round trips at every chunk size, and every way a
// chunk can go wrong in transit refused by the staging buffer with a line
// naming the chunk (the transport faults, which faults/faults_test.cc
// injects, among them).
#include <gtest/gtest.h>

#include <numeric>

#include "sync/transport.h"
#include "util/error.h"

namespace mxrl {
namespace {

std::vector<std::byte> bytes_of(size_t n, uint8_t seed) {
  std::vector<std::byte> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
  return b;
}

std::string refusal(uint64_t version, const std::vector<Chunk>& chunks) {
  Staging st(version);
  try {
    for (const Chunk& c : chunks) st.accept(c);
    st.take();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Transport, RoundTripsAtEveryChunkSize) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{1000}, size_t{4096}}) {
    const auto b = bytes_of(n, 1);
    for (size_t cb : {size_t{1}, size_t{7}, size_t{64}, size_t{1} << 20}) {
      const auto chunks = make_chunks(b, 5, cb);
      EXPECT_EQ(chunks.size(), std::max<size_t>(1, (n + cb - 1) / cb));
      Staging st(5);
      for (const Chunk& c : chunks) {
        EXPECT_FALSE(st.complete());
        st.accept(c);
      }
      EXPECT_TRUE(st.complete());
      EXPECT_EQ(st.take(), b) << n << " " << cb;
    }
  }
}

TEST(Transport, RefusesWhatTransitBreaks) {
  const auto b = bytes_of(1000, 2);
  const auto good = make_chunks(b, 3, 100);
  auto edit = [&](auto f) {
    auto c = good;
    f(c);
    return refusal(3, c);
  };
  EXPECT_EQ(refusal(3, good), "");
  EXPECT_NE(edit([](auto& c) { c[4][100] ^= std::byte{1}; }).find("chunk 4: XXH3 does not match"), std::string::npos);
  EXPECT_NE(edit([](auto& c) { c[4][20] ^= std::byte{1}; }).find("chunk 4"), std::string::npos);  // header: count
  EXPECT_NE(edit([](auto& c) { c[5].resize(c[5].size() - 1); }).find("chunk 5: truncated"), std::string::npos);
  EXPECT_NE(edit([](auto& c) { c[5].resize(10); }).find("shorter than the 64-byte header"), std::string::npos);
  EXPECT_NE(edit([](auto& c) { c.pop_back(); }).find("9 of 10 chunks staged"), std::string::npos);
  EXPECT_NE(edit([](auto& c) { std::swap(c[2], c[3]); }).find("chunk 3 arrived where chunk 2 was due"),
            std::string::npos);
  EXPECT_NE(edit([](auto& c) { c[6] = c[5]; }).find("chunk 5 arrived where chunk 6"), std::string::npos);
  EXPECT_NE(edit([](auto& c) { c[0][0] = std::byte{'X'}; }).find("bad magic"), std::string::npos);
  const auto old = make_chunks(b, 2, 100);
  EXPECT_NE(edit([&](auto& c) { c[7] = old[7]; }).find("chunk 7 is of version 2, expected version 3"),
            std::string::npos);
}

// A hook sees every frame of a send, and its edits go on the wire: the
// receiver refuses an edited frame, naming the chunk.
TEST(Transport, ChannelHooksEditTheFramesOfASend) {
  struct FlipLast : ChannelHooks {
    std::vector<std::byte> copy;
    size_t seen = 0;
    void edit(std::vector<ChunkFrame>& frames, std::span<const std::byte>, uint64_t, size_t) override {
      seen = frames.size();
      copy.assign(frames.back().payload.begin(), frames.back().payload.end());
      copy[0] ^= std::byte{1};
      frames.back().payload = copy;
    }
  } hook;
  const auto b = bytes_of(900, 5);
  ChunkSender sender(128);
  EXPECT_EQ(pass_through_chunks(sender, b, 1), b);
  try {
    pass_through_chunks(sender, b, 1, &hook);
    ADD_FAILURE() << "the edited frame was not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chunk 7: XXH3 does not match"), std::string::npos) << e.what();
  }
  EXPECT_EQ(hook.seen, 8u);
  EXPECT_EQ(chunk_count(900, 128), 8u);
  EXPECT_EQ(chunk_frame(b, 1, 128, 7).payload.size(), 900u - 7 * 128);
}

}  // namespace
}  // namespace mxrl
