#include "util/metrics.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>

#include "util/error.h"
#include "util/run_dir.h"

namespace mxrl {

MetricsSink::MetricsSink(const std::string& path) : path_(path) {
  if (path.empty()) return;
  make_parent_dirs(path);
  out_ = std::fopen(path.c_str(), "w");
  if (!out_) fail("{}: cannot open for writing: {}", path, std::strerror(errno));
}

MetricsSink::~MetricsSink() {
  if (out_) std::fclose(out_);
}

void MetricsSink::write(const nlohmann::json& record) {
  if (!out_) return;
  const std::string line = record.dump() + "\n";
  errno = 0;
  if (std::fwrite(line.data(), 1, line.size(), out_) != line.size() || std::fflush(out_) != 0)
    fail("{}: write failed: {}", path_, errno ? std::strerror(errno) : "unknown error");
}

}  // namespace mxrl
