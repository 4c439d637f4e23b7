#include "util/text.h"

#include <fstream>
#include <sstream>

#include "util/error.h"

namespace mxrl {
std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open", path);
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("{}: read failed", path);
  return ss.str();
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}
}  // namespace mxrl
