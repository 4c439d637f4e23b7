// AtomicFile — write a file so that readers see either the old contents or
// the complete new contents, never a partial file.
//
// Writes go to "<path>.tmp.XXXXXX" (mkstemp) in the destination directory;
// commit() fsyncs it, renames it into place and fsyncs the directory.
// Destruction without commit() unlinks the temporary file, so a failed or
// interrupted write never leaves a partial output (and never clobbers an
// existing one). The new file gets mode 0666 & ~umask, like open(2) would.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace mxrl {

class AtomicFile {
 public:
  // Throws mxrl::Error "PATH: cannot create temporary file: <strerror>".
  explicit AtomicFile(std::string path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  // Appends n bytes. Throws mxrl::Error naming the path on any failure
  // (ENOSPC, EIO, ...); after a failure the file can no longer be committed.
  void write(const void* data, size_t n);
  // Makes the file durable and visible at path(). Throws on failure; the
  // temporary file is then removed by the destructor.
  void commit();

  // The destination path.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  bool failed_ = false;
  bool committed_ = false;
};

// Replaces (or creates) `path` with `contents`, atomically.
void write_file_atomic(const std::string& path, std::string_view contents);

// Replaces (or creates) the directory `dir` as a whole: fill(tmp_dir) writes
// the new contents into a fresh sibling directory "<dir>.partial-XXXXXX"
// (mode 0777 & ~umask), which is then swapped into place (renameat2
// RENAME_EXCHANGE where the file system supports it, so readers never see
// `dir` missing; two renames otherwise) and the parent directory fsynced.
// Files written with AtomicFile / write_file_atomic inside tmp_dir are
// durable. Missing parent directories are created. If fill throws, or
// anything else fails, the temporary directory is removed and an existing
// `dir` is left untouched; the exception propagates (filesystem failures of
// this function itself are mxrl::Error naming `dir`). `dir` may exist only as
// a directory (a symlink to one is replaced by a real directory).
void write_dir_atomic(const std::string& dir, const std::function<void(const std::string& tmp_dir)>& fill);

}  // namespace mxrl
