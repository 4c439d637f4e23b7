// The chunked transport of a sync bundle (docs/reference.md §6; the channel seam). The
// learner cuts the bundle bytes into chunks, each with a 64-byte header:
//
//   magic "MXRLCHK1" | version u64 | index u32 | count u32 | total u64 |
//   offset u64 | length u64 | xxh3 u64
//
// where xxh3 is XXH3-64 of the payload, seeded with XXH3-64 of the first 56
// header bytes, so a chunk whose header or payload changed in transit is
// refused. The sampler writes chunks into a staging buffer, never into its
// live weights: only a complete, verified bundle of the expected version
// leaves the staging buffer, so no sampler ever serves a half-written or
// mixed version. The in-process channel and the MPI channel both go through
// this code.
//
// The transport faults (faults/faults.h, seam "channel") edit the chunk
// stream on the sending side through ChannelHooks (faults/hooks.h implements
// them; the transport knows no fault by name). (sampler-killed is the MPI
// receiver's: see dist/distributed.h.)
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mxrl {

inline constexpr size_t kChunkHeaderBytes = 64;
inline constexpr size_t kDefaultChunkBytes = size_t{1} << 20;

using Chunk = std::vector<std::byte>;

// Cuts `bundle` (version `version`) into chunks of at most `chunk_bytes`
// payload (at least one chunk, even for an empty bundle).
std::vector<Chunk> make_chunks(std::span<const std::byte> bundle, uint64_t version, size_t chunk_bytes);
// How many chunks that is (throws on a chunk size outside 1 .. 1 GiB).
size_t chunk_count(size_t bytes, size_t chunk_bytes);

// A chunk as it goes on the wire: its header, and its payload as a view (of
// the bundle itself, or of a copy a fault edited): no copy of the bundle.
struct ChunkFrame {
  std::array<std::byte, kChunkHeaderBytes> header;
  std::span<const std::byte> payload;
};

// Chunk `index` of `bundle` as it goes on the wire (a view of the bundle).
ChunkFrame chunk_frame(std::span<const std::byte> bundle, uint64_t version, size_t chunk_bytes, size_t index);

// The channel's seam for injected faults: edits the frames of one send
// before they leave. An edited payload must stay valid until the next call;
// a hook may keep state from send to send (e.g. the previous bundle).
class ChannelHooks {
 public:
  virtual ~ChannelHooks() = default;
  virtual void edit(std::vector<ChunkFrame>& frames, std::span<const std::byte> bundle, uint64_t version,
                    size_t chunk_bytes) = 0;
};

// The sender: cuts, and lets `hooks` (null: none) edit the frames.
class ChunkSender {
 public:
  explicit ChunkSender(size_t chunk_bytes = kDefaultChunkBytes);  // at most 1 GiB
  // Frames view `bundle` (or the hooks' buffers): valid while it lives and
  // until the next call.
  std::vector<ChunkFrame> frames(std::span<const std::byte> bundle, uint64_t version, ChannelHooks* hooks = nullptr);
  // The same, each frame joined into one buffer (the in-process channel).
  std::vector<Chunk> send(std::span<const std::byte> bundle, uint64_t version, ChannelHooks* hooks = nullptr);
  size_t chunk_bytes() const { return chunk_bytes_; }

 private:
  size_t chunk_bytes_;
};

// The receiver's staging buffer for one version.
class Staging {
 public:
  explicit Staging(uint64_t version, std::string label = "transfer");
  // Takes the next chunk in order. Throws one line naming the chunk on a
  // short header, a bad magic, another version (an old version's chunk), an
  // index out of order, a count, total or offset that disagrees with the
  // chunks before, a payload cut short or too long, or an XXH3 mismatch.
  void accept(std::span<const std::byte> chunk);
  // The same in parts, for a receiver that writes payloads in place:
  // begin_chunk checks the header and the payload length that arrives
  // (`wire_bytes`) and returns where the payload goes; verify(i) checks
  // chunk i's XXH3 and done(i) records it; end_chunk() = verify + done of
  // the oldest chunk begun. take() refuses a bundle with a chunk not verified.
  // Nothing is allocated by a header's word before chunk 0's XXH3 checks out.
  std::span<std::byte> begin_chunk(std::span<const std::byte> header, size_t wire_bytes);
  void verify(uint32_t i) const;
  void done(uint32_t i);
  void end_chunk();
  bool complete() const { return count_ > 0 && next_ == count_; }
  uint32_t chunks_expected() const { return count_; }  // 0 before the first chunk
  // The whole bundle; throws if chunks are missing.
  std::vector<std::byte> take();

 private:
  uint64_t version_;
  std::string label_;
  uint32_t count_ = 0, next_ = 0;
  uint64_t total_ = 0, filled_ = 0;
  std::vector<std::byte> buf_;
  struct Check {
    std::array<std::byte, kChunkHeaderBytes> header{};
    uint64_t offset = 0, length = 0, digest = 0;
  };
  std::vector<Check> checks_;  // one per chunk begun
  uint32_t verified_ = 0;
};

// The in-process channel: send, then stage every chunk, then take.
std::vector<std::byte> pass_through_chunks(ChunkSender& sender, std::span<const std::byte> bundle, uint64_t version,
                                           ChannelHooks* hooks = nullptr);

}  // namespace mxrl
