#include "util/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
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

// fsync a directory; 0 or the errno. EINVAL (file systems that cannot fsync
// a directory) counts as success.
int fsync_dir(const std::string& dir) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return errno;
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  return rc == 0 || err == EINVAL ? 0 : err;
}

// renameat2 flags the file system (or kernel) does not support.
bool rename_flags_unsupported(int err) { return err == EINVAL || err == ENOSYS || err == EOPNOTSUPP; }

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

void write_dir_atomic(const std::string& dir_s, const std::function<void(const std::string& tmp_dir)>& fill) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::absolute(fs::path(dir_s), ec);
  if (ec) fail("{}: cannot resolve the path: {}", dir_s, ec.message());
  dir = dir.lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "a/b/" -> "a/b"
  if (!dir.has_filename() || dir.filename() == "..") fail("{}: not a usable directory name", dir_s);
  const fs::path parent = dir.parent_path();
  const std::string name = dir.filename().string(), dir_p = dir.string();

  fs::create_directories(parent, ec);
  if (ec || !fs::is_directory(parent))
    fail("{}: cannot create the parent directory {}: {}", dir_s, parent.string(),
         ec ? ec.message() : std::string("not a directory"));
  {
    const fs::file_status st = fs::status(dir, ec);
    if (fs::exists(st) && !fs::is_directory(st)) fail("{}: exists and is not a directory", dir_s);
  }

  std::string tmp = (parent / (name + ".partial-XXXXXX")).string();
  if (::mkdtemp(tmp.data()) == nullptr) fail("{}: cannot create a temporary directory: {}", dir_s, errno_text());
  std::string garbage = tmp;  // what to delete at the end: the temporary, or the old contents
  try {
    if (::chmod(tmp.c_str(), 0777 & ~current_umask()) != 0)
      fail("{}: cannot set permissions of {}: {}", dir_s, tmp, errno_text());
    fill(tmp);
    if (int err = fsync_dir(tmp)) fail("{}: fsync of {} failed: {}", dir_s, tmp, std::strerror(err));

    // Swap the finished directory into place.
    bool fallback = false;
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir_p.c_str(), RENAME_NOREPLACE) == 0) {
      garbage.clear();  // there was no old directory
    } else if (errno == EEXIST) {
      // On success tmp holds the old contents.
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir_p.c_str(), RENAME_EXCHANGE) != 0) {
        if (!rename_flags_unsupported(errno))
          fail("{}: cannot swap the new directory into place: {}", dir_s, errno_text());
        fallback = true;
      }
    } else if (rename_flags_unsupported(errno)) {
      fallback = true;
    } else {
      fail("{}: cannot move the new directory into place: {}", dir_s, errno_text());
    }
    if (fallback) {
      // No atomic exchange here: move the old directory aside, then the new one in.
      if (::rename(tmp.c_str(), dir_p.c_str()) == 0) {  // absent or empty
        garbage.clear();
      } else if (errno == ENOTEMPTY || errno == EEXIST) {
        std::string old = (parent / (name + ".old-XXXXXX")).string();
        if (::mkdtemp(old.data()) == nullptr) fail("{}: cannot create a temporary directory: {}", dir_s, errno_text());
        if (::rename(dir_p.c_str(), old.c_str()) != 0) {
          const std::string err = errno_text();
          ::rmdir(old.c_str());
          fail("{}: cannot move the old directory aside: {}", dir_s, err);
        }
        if (::rename(tmp.c_str(), dir_p.c_str()) != 0) {
          const std::string err = errno_text();
          ::rename(old.c_str(), dir_p.c_str());  // put the old one back
          fail("{}: cannot move the new directory into place: {}", dir_s, err);
        }
        garbage = old;
      } else {
        fail("{}: cannot move the new directory into place: {}", dir_s, errno_text());
      }
    }
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  if (!garbage.empty()) fs::remove_all(garbage, ec);  // best effort: the new directory is in place
  if (int err = fsync_dir(parent.string()))
    fail("{}: fsync of the parent directory failed: {}", dir_s, std::strerror(err));
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFile f(path);
  f.write(contents.data(), contents.size());
  f.commit();
}

}  // namespace mxrl
