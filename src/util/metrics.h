// A metrics sink: one JSON object per line (JSONL), flushed as written so a
// running job can be followed with `tail -f` and a killed one keeps every
// line it wrote. An empty path makes a sink that drops everything.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdio>
#include <string>

namespace mxrl {

class MetricsSink {
 public:
  MetricsSink() = default;
  // Creates the parent folders and truncates `path`; throws mxrl::Error
  // "PATH: cannot open for writing: <strerror>".
  explicit MetricsSink(const std::string& path);
  MetricsSink(const MetricsSink&) = delete;
  MetricsSink& operator=(const MetricsSink&) = delete;
  ~MetricsSink();
  bool enabled() const { return out_ != nullptr; }
  // Throws mxrl::Error "PATH: write failed: <strerror>" (e.g. a full disk).
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::FILE* out_ = nullptr;
};

}  // namespace mxrl
