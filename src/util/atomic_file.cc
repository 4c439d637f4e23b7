#include "util/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "util/error.h"

namespace mxrl {
namespace {

// The process umask, read without changing it (umask(2) can only be read by
// setting it, which races with other threads creating files).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  }
  return 022;  // kernels before 4.7 do not report it; assume the usual default
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::vector<char> tmpl(path_.begin(), path_.end());
  const char suffix[] = ".tmp.XXXXXX";
  tmpl.insert(tmpl.end(), suffix, suffix + sizeof(suffix));  // includes the '\0'
  fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd_ < 0) fail("{}: cannot create temporary file: {}", path_, errno_text());
  tmp_path_ = tmpl.data();
  // mkstemp creates the file 0600; give it the mode a plain open() would.
  if (::fchmod(fd_, 0666 & ~current_umask()) != 0) {
    std::string err = errno_text();
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
    fail("{}: cannot set permissions of temporary file: {}", path_, err);
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  if (committed_) fail("{}: write after commit", path_);
  if (failed_) fail("{}: write after a failed write", path_);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      failed_ = true;
      // write() returning 0 for a regular file means the device is full.
      fail("{}: write failed: {}", path_, w < 0 ? errno_text() : std::strerror(ENOSPC));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFile::commit() {
  if (committed_) fail("{}: committed twice", path_);
  if (failed_) fail("{}: cannot commit after a failed write", path_);
  if (::fsync(fd_) != 0) {
    failed_ = true;
    fail("{}: fsync failed: {}", path_, errno_text());
  }
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {  // NFS and friends report write errors here
    failed_ = true;
    fail("{}: close failed: {}", path_, errno_text());
  }
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    failed_ = true;
    fail("{}: cannot rename temporary file into place: {}", path_, errno_text());
  }
  committed_ = true;
  // Make the rename itself durable.
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail("{}: cannot open directory to fsync it: {}", path_, errno_text());
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  // Some file systems cannot fsync a directory (EINVAL); nothing more to do there.
  if (rc != 0 && err != EINVAL) fail("{}: fsync of the directory failed: {}", path_, std::strerror(err));
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFile f(path);
  f.write(contents.data(), contents.size());
  f.commit();
}

}  // namespace mxrl
