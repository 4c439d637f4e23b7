// A little-endian byte packer for messages between processes (the MPI
// runtime): fixed-width scalars and length-prefixed arrays of them. The
// reader checks every length against what is left and throws one line
// naming the message, so a truncated or garbled message is an error, never
// a read past the end.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "util/error.h"

namespace mxrl {

class ByteWriter {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = buf_.size();
    buf_.resize(at + sizeof(T));
    std::memcpy(buf_.data() + at, &v, sizeof(T));
  }
  template <class T>
  void put_vec(std::span<const T> v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(v.size());
    const size_t at = buf_.size();
    buf_.resize(at + v.size_bytes());
    if (!v.empty()) std::memcpy(buf_.data() + at, v.data(), v.size_bytes());
  }
  template <class T>
  void put_vec(const std::vector<T>& v) {
    put_vec(std::span<const T>(v));
  }
  void put_str(const std::string& s) { put_vec(std::span<const char>(s.data(), s.size())); }
  std::vector<std::byte>& bytes() { return buf_; }

 private:
  std::vector<std::byte> buf_;
};

class ByteReader {
 public:
  ByteReader(std::span<const std::byte> b, std::string what) : b_(b), what_(std::move(what)) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  template <class T>
  std::vector<T> get_vec() {
    const uint64_t n = get<uint64_t>();
    if (n > (b_.size() - at_) / sizeof(T)) fail("{}: an array of {} values runs past the end of the message", what_, n);
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), b_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
    return v;
  }
  std::string get_str() {
    const std::vector<char> c = get_vec<char>();
    return std::string(c.begin(), c.end());
  }
  bool done() const { return at_ == b_.size(); }
  void expect_done() const {
    if (!done()) fail("{}: {} unread bytes at the end of the message", what_, b_.size() - at_);
  }

 private:
  void need(size_t n) const {
    if (n > b_.size() - at_) fail("{}: message ends early (needs {} more bytes, {} left)", what_, n, b_.size() - at_);
  }
  std::span<const std::byte> b_;
  std::string what_;
  size_t at_ = 0;
};

}  // namespace mxrl
