// The one progress line of the mxrl commands: a status on stderr, redrawn in
// place, shown only when stderr is a terminal (logs and pipes get none).
#pragma once
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace mxrl {

class Progress {
 public:
  // min_interval: redraws closer together than this are skipped (show(force=true) is not).
  explicit Progress(std::chrono::milliseconds min_interval = std::chrono::milliseconds(0))
      : on_(::isatty(2) == 1), min_interval_(min_interval) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { clear(); }

  bool on() const { return on_; }
  // Replaces the status line with `text` (unless the last redraw is more
  // recent than min_interval and force is false).
  void show(const std::string& text, bool force = false) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && drawn_ && now - last_ < min_interval_) return;
    last_ = now;
    fmt::print(stderr, "\r\033[K{}", text);
    std::fflush(stderr);
    drawn_ = true;
  }
  // Erases the status line (call before printing a line of its own to stderr).
  void clear() {
    if (!drawn_) return;
    fmt::print(stderr, "\r\033[K");
    std::fflush(stderr);
    drawn_ = false;
  }
  // "[#####.....]" for done/total of `width` characters.
  static std::string bar(double done, double total, int width) {
    const int fill = total > 0 ? static_cast<int>(width * std::min(1.0, std::max(0.0, done / total))) : width;
    return "[" + std::string(fill, '#') + std::string(width - fill, '.') + "]";
  }

 private:
  bool on_, drawn_ = false;
  std::chrono::milliseconds min_interval_;
  std::chrono::steady_clock::time_point last_{};
};

// Seconds as "42s" or "3m07s" (rounded), for progress and summary lines.
inline std::string format_duration(double s) {
  const int64_t t = static_cast<int64_t>(s + 0.5);
  return t >= 60 ? fmt::format("{}m{:02d}s", t / 60, t % 60) : fmt::format("{}s", t);
}

}  // namespace mxrl
