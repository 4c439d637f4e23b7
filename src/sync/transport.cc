#include "sync/transport.h"

#include <algorithm>
#include <cstring>

#include <xxhash.h>

#include "util/error.h"

namespace mxrl::sync {

namespace {
constexpr char kMagic[8] = {'M', 'X', 'R', 'L', 'C', 'H', 'K', '1'};

struct Header {
  uint64_t version = 0;
  uint32_t index = 0, count = 0;
  uint64_t total = 0, offset = 0, length = 0, digest = 0;
};

uint64_t chunk_digest(const std::byte* header56, const std::byte* payload, size_t n) {
  return XXH3_64bits_withSeed(payload, n, XXH3_64bits(header56, 56));
}

void write_header(std::byte* out, const Header& h) {
  std::memcpy(out, kMagic, 8);
  std::memcpy(out + 8, &h.version, 8);
  std::memcpy(out + 16, &h.index, 4);
  std::memcpy(out + 20, &h.count, 4);
  std::memcpy(out + 24, &h.total, 8);
  std::memcpy(out + 32, &h.offset, 8);
  std::memcpy(out + 40, &h.length, 8);
  std::memset(out + 48, 0, 8);
  std::memcpy(out + 56, &h.digest, 8);
}

Header read_header(const std::byte* in) {
  Header h;
  std::memcpy(&h.version, in + 8, 8);
  std::memcpy(&h.index, in + 16, 4);
  std::memcpy(&h.count, in + 20, 4);
  std::memcpy(&h.total, in + 24, 8);
  std::memcpy(&h.offset, in + 32, 8);
  std::memcpy(&h.length, in + 40, 8);
  std::memcpy(&h.digest, in + 56, 8);
  return h;
}
}  // namespace

std::vector<Chunk> make_chunks(std::span<const std::byte> bundle, uint64_t version, size_t chunk_bytes) {
  if (chunk_bytes == 0) fail("sync: chunk size must be positive");
  const size_t n = std::max<size_t>(1, (bundle.size() + chunk_bytes - 1) / chunk_bytes);
  if (n > UINT32_MAX) fail("sync: {} chunks of {} bytes is too many", n, chunk_bytes);
  std::vector<Chunk> out(n);
  for (size_t i = 0; i < n; ++i) {
    Header h;
    h.version = version;
    h.index = static_cast<uint32_t>(i);
    h.count = static_cast<uint32_t>(n);
    h.total = bundle.size();
    h.offset = i * chunk_bytes;
    h.length = std::min(chunk_bytes, bundle.size() - h.offset);
    Chunk& c = out[i];
    c.resize(kChunkHeaderBytes + h.length);
    write_header(c.data(), h);
    if (h.length) std::memcpy(c.data() + kChunkHeaderBytes, bundle.data() + h.offset, h.length);
    h.digest = chunk_digest(c.data(), c.data() + kChunkHeaderBytes, h.length);
    std::memcpy(c.data() + 56, &h.digest, 8);
  }
  return out;
}

ChunkSender::ChunkSender(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {
  if (chunk_bytes == 0) fail("sync: chunk size must be positive");
}

std::vector<Chunk> ChunkSender::send(std::span<const std::byte> bundle, uint64_t version, const FaultPlan& faults) {
  std::vector<Chunk> chunks = make_chunks(bundle, version, chunk_bytes_);
  std::vector<Chunk> sent = chunks;
  const size_t k = sent.size() / 2;
  Chunk& c = sent[k];
  const size_t payload = c.size() - kChunkHeaderBytes;
  if (faults.active(Fault::ChunkCorrupt, version)) {
    if (payload == 0) fail("fault chunk-corrupt: chunk {} has no payload", k);
    c[kChunkHeaderBytes + payload / 2] ^= std::byte{0x10};
  }
  if (faults.active(Fault::ChunkTruncate, version)) c.resize(kChunkHeaderBytes + payload / 2);
  if (faults.active(Fault::ChunkStale, version)) {
    if (previous_.empty()) fail("fault chunk-stale: no previous version was sent");
    c = previous_[std::min(k, previous_.size() - 1)];
  }
  previous_ = std::move(chunks);
  return sent;
}

Staging::Staging(uint64_t version, std::string label) : version_(version), label_(std::move(label)) {}

void Staging::accept(std::span<const std::byte> chunk) {
  const uint32_t at = next_;
  if (chunk.size() < kChunkHeaderBytes)
    fail("{}: version {} chunk {}: {} bytes, shorter than the {}-byte header", label_, version_, at, chunk.size(),
         kChunkHeaderBytes);
  if (std::memcmp(chunk.data(), kMagic, 8) != 0) fail("{}: version {} chunk {}: not a bundle chunk (bad magic)", label_, version_, at);
  const Header h = read_header(chunk.data());
  if (h.version != version_)
    fail("{}: chunk {} is of version {}, expected version {} (a stale chunk)", label_, h.index, h.version, version_);
  if (h.index != at) fail("{}: version {}: chunk {} arrived where chunk {} was due", label_, version_, h.index, at);
  if (at == 0) {
    if (h.count == 0) fail("{}: version {}: chunk count 0", label_, version_);
    count_ = h.count, total_ = h.total;
    buf_.clear();
    buf_.reserve(total_);
  } else if (h.count != count_ || h.total != total_) {
    fail("{}: version {} chunk {}: says {} chunks / {} bytes, chunk 0 said {} / {}", label_, version_, at, h.count, h.total,
         count_, total_);
  }
  if (h.offset != buf_.size() || h.length > total_ - buf_.size())
    fail("{}: version {} chunk {}: offset {} length {} does not continue the {} bytes staged (of {})", label_, version_, at,
         h.offset, h.length, buf_.size(), total_);
  const size_t payload = chunk.size() - kChunkHeaderBytes;
  if (payload != h.length)
    fail("{}: version {} chunk {}: truncated or padded: {} payload bytes, header says {}", label_, version_, at, payload,
         h.length);
  if (chunk_digest(chunk.data(), chunk.data() + kChunkHeaderBytes, payload) != h.digest)
    fail("{}: version {} chunk {}: XXH3 does not match its bytes (corrupted in transit)", label_, version_, at);
  buf_.insert(buf_.end(), chunk.begin() + kChunkHeaderBytes, chunk.end());
  ++next_;
}

std::vector<std::byte> Staging::take() {
  if (!complete())
    fail("{}: version {}: {} of {} chunks staged; the bundle is incomplete", label_, version_, next_, count_);
  if (buf_.size() != total_) fail("{}: version {}: {} bytes staged, expected {}", label_, version_, buf_.size(), total_);
  count_ = next_ = 0;
  return std::move(buf_);
}

std::vector<std::byte> pass_through_chunks(ChunkSender& sender, std::span<const std::byte> bundle, uint64_t version,
                                           const FaultPlan& faults) {
  Staging st(version);
  for (const Chunk& c : sender.send(bundle, version, faults)) st.accept(c);
  return st.take();
}

}  // namespace mxrl::sync
