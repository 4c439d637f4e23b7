#include "sync/transport.h"

#include <algorithm>
#include <cstring>

#include <xxhash.h>

#include "util/error.h"

namespace mxrl {

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

namespace {
ChunkFrame frame_of(std::span<const std::byte> bundle, uint64_t version, size_t chunk_bytes, size_t i, size_t n) {
  Header h;
  h.version = version;
  h.index = static_cast<uint32_t>(i);
  h.count = static_cast<uint32_t>(n);
  h.total = bundle.size();
  h.offset = i * chunk_bytes;
  h.length = std::min(chunk_bytes, bundle.size() - h.offset);
  ChunkFrame f;
  write_header(f.header.data(), h);
  f.payload = bundle.subspan(h.offset, h.length);
  h.digest = chunk_digest(f.header.data(), f.payload.data(), f.payload.size());
  std::memcpy(f.header.data() + 56, &h.digest, 8);
  return f;
}

}  // namespace

size_t chunk_count(size_t bytes, size_t chunk_bytes) {
  if (chunk_bytes == 0 || chunk_bytes > (size_t{1} << 30))
    fail("sync: chunk size must be in 1 .. 1 GiB, got {}", chunk_bytes);
  const size_t n = std::max<size_t>(1, (bytes + chunk_bytes - 1) / chunk_bytes);
  if (n > UINT32_MAX) fail("sync: {} chunks of {} bytes is too many", n, chunk_bytes);
  return n;
}

ChunkFrame chunk_frame(std::span<const std::byte> bundle, uint64_t version, size_t chunk_bytes, size_t index) {
  const size_t n = chunk_count(bundle.size(), chunk_bytes);
  if (index >= n) fail("sync: chunk {} of {}", index, n);
  return frame_of(bundle, version, chunk_bytes, index, n);
}

namespace {
Chunk join(const ChunkFrame& f) {
  Chunk c(kChunkHeaderBytes + f.payload.size());
  std::memcpy(c.data(), f.header.data(), kChunkHeaderBytes);
  if (!f.payload.empty()) std::memcpy(c.data() + kChunkHeaderBytes, f.payload.data(), f.payload.size());
  return c;
}
}  // namespace

std::vector<Chunk> make_chunks(std::span<const std::byte> bundle, uint64_t version, size_t chunk_bytes) {
  const size_t n = chunk_count(bundle.size(), chunk_bytes);
  std::vector<Chunk> out;
  for (size_t i = 0; i < n; ++i) out.push_back(join(frame_of(bundle, version, chunk_bytes, i, n)));
  return out;
}

ChunkSender::ChunkSender(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) { chunk_count(0, chunk_bytes); }

std::vector<ChunkFrame> ChunkSender::frames(std::span<const std::byte> bundle, uint64_t version, ChannelHooks* hooks) {
  const size_t n = chunk_count(bundle.size(), chunk_bytes_);
  std::vector<ChunkFrame> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(frame_of(bundle, version, chunk_bytes_, i, n));
  if (hooks) hooks->edit(out, bundle, version, chunk_bytes_);
  return out;
}

std::vector<Chunk> ChunkSender::send(std::span<const std::byte> bundle, uint64_t version, ChannelHooks* hooks) {
  std::vector<Chunk> out;
  for (const ChunkFrame& f : frames(bundle, version, hooks)) out.push_back(join(f));
  return out;
}

Staging::Staging(uint64_t version, std::string label) : version_(version), label_(std::move(label)) {}

void Staging::accept(std::span<const std::byte> chunk) {
  if (chunk.size() < kChunkHeaderBytes)
    fail("{}: version {} chunk {}: {} bytes, shorter than the {}-byte header", label_, version_, next_, chunk.size(),
         kChunkHeaderBytes);
  const std::span<std::byte> slot = begin_chunk(chunk.first(kChunkHeaderBytes), chunk.size() - kChunkHeaderBytes);
  if (!slot.empty()) std::memcpy(slot.data(), chunk.data() + kChunkHeaderBytes, slot.size());
  end_chunk();
}

std::span<std::byte> Staging::begin_chunk(std::span<const std::byte> header, size_t wire_bytes) {
  const uint32_t at = next_;
  if (header.size() != kChunkHeaderBytes)
    fail("{}: version {} chunk {}: a {}-byte header", label_, version_, at, header.size());
  if (std::memcmp(header.data(), kMagic, 8) != 0)
    fail("{}: version {} chunk {}: not a bundle chunk (bad magic)", label_, version_, at);
  const Header h = read_header(header.data());
  if (h.version != version_)
    fail("{}: chunk {} is of version {}, expected version {} (a stale chunk)", label_, h.index, h.version, version_);
  if (h.index != at) fail("{}: version {}: chunk {} arrived where chunk {} was due", label_, version_, h.index, at);
  if (at == 0) {
    if (h.count == 0) fail("{}: version {}: chunk count 0", label_, version_);
    if (h.total > (uint64_t{1} << 40)) fail("{}: version {}: {} bytes is beyond any bundle", label_, version_, h.total);
    if (h.count > h.total + 1) fail("{}: version {}: {} chunks for {} bytes", label_, version_, h.count, h.total);
    // Nothing is sized by the header before its XXH3 checks out: the buffer
    // grows by what arrives, and is reserved whole once chunk 0 verifies.
    count_ = h.count, total_ = h.total, filled_ = 0, verified_ = 0;
    buf_.clear();
    checks_.clear();
  } else if (h.count != count_ || h.total != total_) {
    fail("{}: version {} chunk {}: says {} chunks / {} bytes, chunk 0 said {} / {}", label_, version_, at, h.count,
         h.total, count_, total_);
  }
  if (h.offset != filled_ || h.length > total_ - filled_)
    fail("{}: version {} chunk {}: offset {} length {} does not continue the {} bytes staged (of {})", label_, version_,
         at, h.offset, h.length, filled_, total_);
  if (wire_bytes != h.length)
    fail("{}: version {} chunk {}: truncated or padded: {} payload bytes, header says {}", label_, version_, at,
         wire_bytes, h.length);
  Check& c = checks_.emplace_back();
  std::memcpy(c.header.data(), header.data(), kChunkHeaderBytes);
  c.offset = h.offset, c.length = h.length, c.digest = h.digest;
  filled_ += h.length;
  buf_.resize(filled_);
  ++next_;
  return std::span<std::byte>(buf_).subspan(c.offset, c.length);
}

void Staging::verify(uint32_t i) const {
  if (i >= next_) fail("{}: version {}: chunk {} not begun", label_, version_, i);
  const Check& c = checks_[i];
  if (chunk_digest(c.header.data(), buf_.data() + c.offset, c.length) != c.digest)
    fail("{}: version {} chunk {}: XXH3 does not match its bytes (corrupted in transit)", label_, version_, i);
}

void Staging::done(uint32_t i) {
  if (i != verified_) fail("{}: version {}: chunk {} verified out of order", label_, version_, i);
  if (i == 0) buf_.reserve(total_);  // the size chunk 0's verified header gives
  ++verified_;
}

void Staging::end_chunk() {
  verify(verified_);
  done(verified_);
}

std::vector<std::byte> Staging::take() {
  if (!complete())
    fail("{}: version {}: {} of {} chunks staged; the bundle is incomplete", label_, version_, next_, count_);
  if (verified_ != count_) fail("{}: version {}: {} of {} chunks verified", label_, version_, verified_, count_);
  if (filled_ != total_) fail("{}: version {}: {} bytes staged, expected {}", label_, version_, filled_, total_);
  count_ = next_ = verified_ = 0;
  filled_ = 0;
  return std::move(buf_);
}

std::vector<std::byte> pass_through_chunks(ChunkSender& sender, std::span<const std::byte> bundle, uint64_t version,
                                           ChannelHooks* hooks) {
  Staging st(version);
  for (const Chunk& c : sender.send(bundle, version, hooks)) st.accept(c);
  return st.take();
}

}  // namespace mxrl
