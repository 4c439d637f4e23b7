#include "cli/config_file.h"

#include <toml++/toml.h>

#include <algorithm>

#include <fmt/format.h>

#include "util/error.h"

namespace mxrl {

namespace {
// The value as the command line would spell it, checked against the option's type.
std::string as_argument(const toml::node& v, const CLI::Option& opt, const std::string& where) {
  const bool flag = opt.get_items_expected_max() == 0;
  const std::string type = opt.get_type_name();
  if (flag) {
    if (auto b = v.value_exact<bool>()) return *b ? "true" : "false";
    fail("{}: expected true or false", where);
  }
  if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0) {
    if (auto i = v.value_exact<int64_t>()) return std::to_string(*i);
    fail("{}: expected an integer", where);
  }
  if (type.rfind("FLOAT", 0) == 0) {
    if (auto i = v.value_exact<int64_t>()) return std::to_string(*i);
    if (auto d = v.value_exact<double>()) return fmt::format("{}", *d);
    fail("{}: expected a number", where);
  }
  if (auto s = v.value_exact<std::string>()) return *s;
  fail("{}: expected a string", where);
}
}  // namespace

void apply_config_file(CLI::App* cmd, const std::string& path) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    fail("{}:{}: {}", path, e.source().begin.line, e.description());
  }
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    const std::string where = fmt::format("{}: key '{}'", path, key);
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    CLI::Option* opt = key == "config" ? nullptr : cmd->get_option_no_throw(flag);
    if (!opt)
      fail("{}: unknown key '{}' (the keys are the long options of `mxrl {}`, with _ for -)", path, key,
           cmd->get_name());
    const bool many = opt->get_items_expected_max() > 1;  // a list option (--inject, --presets): an array
    if (v.is_table() || (v.is_array() && !many)) fail("{}: expected a single value", where);
    std::vector<std::string> args;
    if (const toml::array* arr = v.as_array()) {
      for (const toml::node& e : *arr) {
        if (e.is_table() || e.is_array()) fail("{}: expected an array of single values", where);
        args.push_back(as_argument(e, *opt, where));
      }
    } else {
      args.push_back(as_argument(v, *opt, where));
    }
    if (cmd->count(flag) > 0) continue;  // given on the command line: it wins
    try {
      opt->clear();
      for (const std::string& arg : args) opt->add_result(arg);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      fail("{}: {}", where, e.what());
    }
  }
}

}  // namespace mxrl
