#include "util/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "util/error.h"

namespace mxrl {
namespace fs = std::filesystem;

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "step-NNNNNN" or "final": a run's checkpoint folder.
bool checkpoint_name(std::string_view n) {
  return n == "final" || (n.rfind("step-", 0) == 0 && all_digits(n.substr(5)));
}

// "<checkpoint>.partial-XXXXXX" or "<checkpoint>.old-XXXXXX": write_dir_atomic's temporaries.
bool partial_name(std::string_view n) {
  for (std::string_view tag : {".partial-", ".old-"}) {
    const size_t at = n.rfind(tag);
    if (at != std::string_view::npos && checkpoint_name(n.substr(0, at)) && n.size() == at + tag.size() + 6)
      return true;
  }
  return false;
}

std::string this_command() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && s.back() == '\0') s.pop_back();
  std::replace(s.begin(), s.end(), '\0', ' ');
  return s;
}

std::string holder_line(const std::string& command) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  std::string line = fmt::format("pid {} on host {}, since {}: {}", ::getpid(), host, when,
                                 command.empty() ? this_command() : command);
  std::replace(line.begin(), line.end(), '\n', ' ');
  return line;
}

std::string read_fd(int fd) {
  std::string s;
  char buf[4096];
  off_t at = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    s.append(buf, static_cast<size_t>(n));
    at += n;
  }
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

// "a, b, c" (at most 4 names, then "and N more").
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 4; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > 4) s += fmt::format(" and {} more", v.size() - 4);
  return s;
}

bool same_dir(const fs::path& a, const fs::path& b) {
  std::error_code ec1, ec2;
  const bool eq = fs::equivalent(a, b, ec1);
  return !ec1 && !ec2 && eq;
}

}  // namespace

RunDir::RunDir(RunDir&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), dir_(std::move(o.dir_)), notes_(std::move(o.notes_)) {}

RunDir& RunDir::operator=(RunDir&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    dir_ = std::move(o.dir_);
    notes_ = std::move(o.notes_);
  }
  return *this;
}

RunDir::~RunDir() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

RunDir RunDir::open(const std::string& dir, const RunDirOptions& o) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    fail("{}: cannot create the output folder: {}", dir, ec ? ec.message() : std::string("not a directory"));
  RunDir r;
  r.dir_ = dir;
  const std::string lock_path = (fs::path(dir) / kLockFile).string();
  r.fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (r.fd_ < 0) fail("{}: cannot open the lock file: {}", lock_path, std::strerror(errno));
  if (::flock(r.fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) fail("{}: cannot lock: {}", lock_path, std::strerror(err));
    const std::string holder = read_fd(r.fd_);
    fail("{}: another run is writing to this folder ({}); wait for it to end or choose another output folder", dir,
         holder.empty() ? "its holder has not written its name yet" : holder);
  }
  const std::string line = holder_line(o.command) + "\n";
  if (::ftruncate(r.fd_, 0) != 0 || ::pwrite(r.fd_, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size()))
    fail("{}: cannot write the lock file: {}", lock_path, std::strerror(errno));

  // Under the lock: nothing else writes here now.
  std::vector<std::string> partial, checkpoints;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (!e.is_directory(ec)) continue;
    if (partial_name(n))
      partial.push_back(n);
    else if (checkpoint_name(n))
      checkpoints.push_back(n);
  }
  if (ec) fail("{}: cannot list the output folder: {}", dir, ec.message());
  std::sort(partial.begin(), partial.end());
  std::sort(checkpoints.begin(), checkpoints.end());
  if (!partial.empty()) {
    for (const std::string& n : partial) {
      fs::remove_all(fs::path(dir) / n, ec);
      if (ec) fail("{}: cannot remove {} (left by an interrupted save): {}", dir, n, ec.message());
    }
    r.notes_.push_back(fmt::format("{}: removed {} folder{} left by an interrupted save: {}", dir, partial.size(),
                                   partial.size() == 1 ? "" : "s", join(partial)));
  }
  if (!checkpoints.empty()) {
    bool own = false;
    if (!o.resume_from.empty()) {
      fs::path from = fs::absolute(o.resume_from, ec).lexically_normal();
      if (!from.has_filename()) from = from.parent_path();  // "D/step-000002/"
      own = !ec && same_dir(from.parent_path(), dir);
    }
    if (own) {
      // A resumed run continues in its own folder.
    } else if (o.overwrite) {
      for (const std::string& n : checkpoints) {
        fs::remove_all(fs::path(dir) / n, ec);
        if (ec) fail("{}: cannot remove {} (--overwrite): {}", dir, n, ec.message());
      }
      r.notes_.push_back(
          fmt::format("{}: removed another run's checkpoints (--overwrite): {}", dir, join(checkpoints)));
    } else {
      fail(
          "{}: holds another run's checkpoints ({}); resume one of them with --resume, choose another output "
          "folder, or pass --overwrite to replace them",
          dir, join(checkpoints));
    }
  }
  return r;
}

void make_parent_dirs(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec || !fs::is_directory(parent))
    fail("{}: cannot create the folder {}: {}", path, parent.string(),
         ec ? ec.message() : std::string("not a directory"));
}

}  // namespace mxrl
