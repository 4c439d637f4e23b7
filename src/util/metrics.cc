#include "util/metrics.h"

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace mxrl {

MetricsSink::MetricsSink(const std::string& path) : path_(path) {
  if (path.empty()) return;
  out_.open(path, std::ios::trunc);
  if (!out_) fail("{}: cannot open for writing", path);
}

void MetricsSink::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  out_ << record.dump() << "\n" << std::flush;
  if (!out_) fail("{}: write failed", path_);
}

}  // namespace mxrl
