// A settings table (util/settings.h) as CLI11 options: one option per field
// with a flag (--prompts-per-step for prompts_per_step), bound to the member,
// its help, its default (the member's value when registered), its bounds as a
// check with a short message ("--steps: must be >= 1, got 0"), enums as their
// names. The --config file (cli/config_file.h) sets these options by their
// flags; --resume refuses the ones given (given_flags).
#pragma once
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "util/settings.h"

namespace mxrl {

// A check that a number is within `b`: "must be >= 1, got 0" instead of
// CLI11's range message. A value that is not a number passes (its conversion
// reports it).
CLI::Validator within(const SettingBounds& b);
inline CLI::Validator at_least(double lo) { return within(SettingBounds{lo}); }
inline CLI::Validator positive() { return within(SettingBounds{0, SettingBounds{}.hi, true}); }
inline CLI::Validator non_negative() { return at_least(0); }
inline CLI::Validator in_range(double lo, double hi) { return within(SettingBounds{lo, hi}); }

// Registers the options of the fields of `t` that have a flag, bound to `cfg`
// (which must outlive the parse).
template <class C>
void add_options(CLI::App* c, C& cfg, const SettingsTable<C>& t) {
  for (const SettingsField<C>& f : t) {
    if (f.flag.empty()) continue;
    const std::string flag = "--" + f.flag;
    CLI::Option* o = nullptr;
    switch (f.kind) {
      case SettingKind::Int: o = c->add_option(flag, f.template at<int64_t>(cfg), f.help)->capture_default_str(); break;
      case SettingKind::UInt:
        o = c->add_option(flag, f.template at<uint64_t>(cfg), f.help)->capture_default_str();
        break;
      case SettingKind::Double:
        o = c->add_option(flag, f.template at<double>(cfg), f.help)->capture_default_str();
        break;
      case SettingKind::Float: o = c->add_option(flag, f.template at<float>(cfg), f.help)->capture_default_str(); break;
      case SettingKind::Bool: o = c->add_flag(flag, f.template at<bool>(cfg), f.help); break;
      case SettingKind::String:
        o = c->add_option(flag, f.template at<std::string>(cfg), f.help)->capture_default_str();
        break;
      case SettingKind::Strings:
        o = c->add_option(flag, f.template at<std::vector<std::string>>(cfg), f.help)->take_all();
        break;
      case SettingKind::Enum:
        o = c->add_option_function<std::string>(
                 flag, [&cfg, f](const std::string& s) { f.set_name(cfg, s); }, f.help)
                ->check(CLI::IsMember(f.names))
                ->default_str(f.enum_name(cfg));
        break;
    }
    if (f.bounds.any()) o->check(within(f.bounds));
  }
}

// The flags of `t` given on the command line or by --config ("--lr", ...).
template <class C>
std::vector<std::string> given_flags(CLI::App* c, const SettingsTable<C>& t) {
  std::vector<std::string> out;
  for (const SettingsField<C>& f : t)
    if (!f.flag.empty() && c->count("--" + f.flag) > 0) out.push_back("--" + f.flag);
  return out;
}

// --resume continues a run with its saved settings: one line naming the first
// setting of `t` (or of `extra`, e.g. --model) that was given anyway.
[[noreturn]] void refuse_given_on_resume(const std::string& flag);
template <class C>
void refuse_on_resume(CLI::App* c, const SettingsTable<C>& t, const std::vector<std::string>& extra) {
  std::vector<std::string> given = given_flags(c, t);
  for (const std::string& e : extra)
    if (const CLI::Option* o = c->get_option_no_throw(e); o && o->count() > 0) given.push_back(e);
  if (!given.empty()) refuse_given_on_resume(given.front());
}

}  // namespace mxrl
