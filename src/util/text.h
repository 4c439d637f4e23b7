// Small text helpers shared by the readers: a whole file as text, a shape as "[2, 3]".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mxrl {
// The bytes of `path`; throws mxrl::Error "PATH: cannot open" / "PATH: read failed".
std::string read_text_file(const std::string& path);
// "[2, 3]" ("[]" for a scalar).
std::string shape_str(const std::vector<int64_t>& shape);
}  // namespace mxrl
