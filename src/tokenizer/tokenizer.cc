// Tokenizer: loading, encode and decode.
#include "tokenizer/tokenizer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tokenizer/tokenizer_impl.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace mxrl {

namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, n);
  const bool bad = std::ferror(f);
  const int err = errno;
  std::fclose(f);
  if (bad) fail("{}: cannot read: {}", path, std::strerror(err));
  return data;
}

// `path`, or path/tokenizer.json when `path` is a directory.
std::string file_in(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? (fs::path(path) / "tokenizer.json").string() : path;
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  const std::string file = file_in(path);
  return from_json(read_file(file), file);
}

Tokenizer Tokenizer::from_json(std::string_view json, const std::string& label) {
  return Tokenizer(detail::parse_tokenizer_json(json, label));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  using namespace detail;
  const Impl& im = *impl_;
  if (const size_t bad = find_invalid_utf8(text); bad != std::string_view::npos)
    fail("{}: cannot encode: the text is not valid UTF-8 (byte {} of {})", im.label, bad, text.size());
  std::vector<int32_t> ids;
  auto md = make_match_data();
  std::vector<Segment> raw_segments, segments;
  std::vector<std::string> pieces;
  im.raw_matcher.split(text, im.added, raw_segments);
  for (const Segment& rs : raw_segments) {
    if (rs.id >= 0) {
      ids.push_back(rs.id);
      continue;
    }
    const std::string normalized = normalize(rs.text, im.normalizer);
    segments.clear();
    im.normalized_matcher.split(normalized, im.added, segments);
    for (const Segment& s : segments) {
      if (s.id >= 0) {
        ids.push_back(s.id);
        continue;
      }
      pieces.clear();
      pre_tokenize(s.text, im.pre_steps, md.get(), im.label, pieces);
      for (const std::string& p : pieces) im.bpe.encode_cached(p, im.label, ids);
    }
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  using namespace detail;
  const Impl& im = *impl_;
  std::string bytes;
  for (const int32_t id : ids) {
    if (const auto token = im.bpe.vocab.token(id)) {
      append_byte_level_decoded(bytes, *token);
    } else if (auto a = im.added_by_id.find(id); a != im.added_by_id.end()) {
      bytes += im.added[a->second].text;
    } else {
      fail("{}: cannot decode: unknown token id {} (vocab size {})", im.label, id, im.vocab_size);
    }
  }
  return utf8_lossy(bytes);
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  const std::string key(token);
  if (auto a = impl_->added_by_content.find(key); a != impl_->added_by_content.end()) return impl_->added[a->second].id;
  if (const int32_t id = impl_->bpe.vocab.find(key); id >= 0) return id;
  return std::nullopt;
}

const std::string& Tokenizer::label() const { return impl_->label; }

std::string Tokenizer::to_json() const { return detail::write_tokenizer_json(*impl_); }

void Tokenizer::save(const std::string& path) const { write_file_atomic(file_in(path), to_json()); }

}  // namespace mxrl
