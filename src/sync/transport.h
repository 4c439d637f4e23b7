// The chunked transport of a sync bundle (BRIEF §6; the channel seam). The
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
// The transport faults (util/faults.h, seam "channel") edit the chunk stream
// on the sending side: chunk-corrupt flips a byte of chunk count/2's
// payload, chunk-truncate cuts that chunk's payload in half, chunk-stale
// sends the previous version's chunk in its place. (sampler-killed is the
// MPI receiver's: see rl/distributed.h.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "util/faults.h"

namespace mxrl::sync {

inline constexpr size_t kChunkHeaderBytes = 64;
inline constexpr size_t kDefaultChunkBytes = size_t{1} << 20;

using Chunk = std::vector<std::byte>;

// Cuts `bundle` (version `version`) into chunks of at most `chunk_bytes`
// payload (at least one chunk, even for an empty bundle).
std::vector<Chunk> make_chunks(std::span<const std::byte> bundle, uint64_t version, size_t chunk_bytes);

// The sender: cuts, keeps the chunks of the last version sent (what
// chunk-stale resends), and applies the transport faults active at `version`.
class ChunkSender {
 public:
  explicit ChunkSender(size_t chunk_bytes = kDefaultChunkBytes);
  std::vector<Chunk> send(std::span<const std::byte> bundle, uint64_t version, const FaultPlan& faults);
  size_t chunk_bytes() const { return chunk_bytes_; }

 private:
  size_t chunk_bytes_;
  std::vector<Chunk> previous_;
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
  bool complete() const { return count_ > 0 && next_ == count_; }
  uint32_t chunks_expected() const { return count_; }  // 0 before the first chunk
  // The whole bundle; throws if chunks are missing.
  std::vector<std::byte> take();

 private:
  uint64_t version_;
  std::string label_;
  uint32_t count_ = 0, next_ = 0;
  uint64_t total_ = 0;
  std::vector<std::byte> buf_;
};

// The in-process channel: send, then stage every chunk, then take.
std::vector<std::byte> pass_through_chunks(ChunkSender& sender, std::span<const std::byte> bundle, uint64_t version,
                                           const FaultPlan& faults);

}  // namespace mxrl::sync
