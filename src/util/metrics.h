// A metrics sink: one JSON object per line (JSONL), flushed as written so a
// running job can be followed with `tail -f` and a killed one keeps every
// line it wrote. An empty path makes a sink that drops everything.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <fstream>
#include <string>

namespace mxrl {

class MetricsSink {
 public:
  MetricsSink() = default;
  // Truncates `path`; throws mxrl::Error "PATH: cannot open for writing".
  explicit MetricsSink(const std::string& path);
  bool enabled() const { return out_.is_open(); }
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace mxrl
