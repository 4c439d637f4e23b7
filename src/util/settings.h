// Settings declared once. A config struct (RlConfig, SftConfig, LearnerConfig,
// OptimConfig) lists its fields in one table, next to the struct: the JSON key
// (a dotted path into nested objects, "optim.lr"), the command-line flag (also
// the --config TOML key, with _ for -), the help text, the bounds, and how to
// reach the member. The default is the struct's own initializer. The table
// drives JSON out and in (to_json / from_json: the keys and value formats the
// training states use), the per-field checks (check_bounds: one line each,
// "optimizer config: lr must be > 0, got 0"), and in the front ends the
// options, the --config file and the --resume refusals (cli/settings_cli.h).
//
//   const SettingsTable<OptimConfig>& optim_fields() {
//     static const SettingsTable<OptimConfig> t = {
//         setting_field<OptimConfig>("lr", "Peak learning rate", &OptimConfig::lr).above(0), ...};
//     return t;
//   }
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mxrl {

enum class SettingKind { Int, UInt, Double, Float, Bool, String, Strings, Enum };

// Closed or open bounds of a number.
struct SettingBounds {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool any() const { return std::isfinite(lo) || std::isfinite(hi); }
  bool contains(double v) const;  // false for NaN
  // "must be >= 1", "must be > 0", "must be in [0, 1)"; "" without bounds.
  std::string text() const;
};

template <class C>
struct SettingsField {
  std::string key;   // JSON key, a dotted path into nested objects
  std::string flag;  // the long option without "--" ("": none); the TOML key is it with _ for -
  std::string help;
  SettingKind kind = SettingKind::Int;
  SettingBounds bounds;
  std::vector<std::string> names;    // Enum: the names of its values, in `values` order
  bool optional = false;             // from_json: a missing key keeps the default (states saved before it existed)
  std::function<void*(C&)> ref;      // the member, of the type `kind` names (every kind but Enum)
  std::function<int(const C&)> get;  // Enum: the index of the value in `names`
  std::function<void(C&, int)> set;  // Enum: sets the value of names[i]

  template <class T>
  T& at(C& c) const {
    return *static_cast<T*>(ref(c));
  }
  template <class T>
  const T& at(const C& c) const {
    return *static_cast<const T*>(ref(const_cast<C&>(c)));
  }
  const std::string& enum_name(const C& c) const { return names.at(static_cast<size_t>(get(c))); }
  // Sets an Enum field by name; false if `name` is none of `names`.
  bool set_name(C& c, std::string_view name) const;

  SettingsField& min(double lo) { return bound(lo, false, bounds.hi, bounds.hi_open); }   // >= lo
  SettingsField& above(double lo) { return bound(lo, true, bounds.hi, bounds.hi_open); }  // > lo
  SettingsField& max(double hi) { return bound(bounds.lo, bounds.lo_open, hi, false); }   // <= hi
  SettingsField& below(double hi) { return bound(bounds.lo, bounds.lo_open, hi, true); }  // < hi
  SettingsField& range(double lo, double hi) { return bound(lo, false, hi, false); }      // in [lo, hi]
  SettingsField& cli(std::string f) {
    flag = std::move(f);
    return *this;
  }
  SettingsField& no_cli() {
    flag.clear();
    return *this;
  }
  SettingsField& optional_key() {
    optional = true;
    return *this;
  }

 private:
  SettingsField& bound(double lo, bool lo_open, double hi, bool hi_open) {
    bounds = SettingBounds{lo, hi, lo_open, hi_open};
    return *this;
  }
};

template <class C>
using SettingsTable = std::vector<SettingsField<C>>;

namespace detail {
template <class T>
constexpr SettingKind kind_of() {
  if constexpr (std::is_same_v<T, int64_t>)
    return SettingKind::Int;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return SettingKind::UInt;
  else if constexpr (std::is_same_v<T, double>)
    return SettingKind::Double;
  else if constexpr (std::is_same_v<T, float>)
    return SettingKind::Float;
  else if constexpr (std::is_same_v<T, bool>)
    return SettingKind::Bool;
  else if constexpr (std::is_same_v<T, std::string>)
    return SettingKind::String;
  else if constexpr (std::is_same_v<T, std::vector<std::string>>)
    return SettingKind::Strings;
  else
    static_assert(sizeof(T) == 0, "a settings field is int64_t, uint64_t, double, float, bool, string or strings");
}
std::string flag_of(std::string_view key);  // the last path component, with - for _

// Readers of one JSON value; errors are "<ctx>: <key> must be ..., got ...".
int64_t read_int(const nlohmann::json& v, std::string_view ctx, std::string_view key);
uint64_t read_uint(const nlohmann::json& v, std::string_view ctx, std::string_view key);
double read_number(const nlohmann::json& v, std::string_view ctx, std::string_view key);
bool read_bool(const nlohmann::json& v, std::string_view ctx, std::string_view key);
std::string read_string(const nlohmann::json& v, std::string_view ctx, std::string_view key);
std::vector<std::string> read_strings(const nlohmann::json& v, std::string_view ctx, std::string_view key);
int read_enum(const nlohmann::json& v, const std::vector<std::string>& names, std::string_view ctx,
              std::string_view key);
[[noreturn]] void missing(std::string_view ctx, std::string_view key);
[[noreturn]] void out_of_bounds(std::string_view ctx, std::string_view key, const SettingBounds& b, double v);
[[noreturn]] void not_finite(std::string_view ctx, std::string_view key, double v);
// The value at a dotted path (null if absent); `slot` makes the objects on the way.
const nlohmann::json* find(const nlohmann::json& j, std::string_view path);
nlohmann::json& slot(nlohmann::json& j, std::string_view path);
// Throws "<ctx>: unknown key 'K'" for a key of j that is no field's key nor an object on a field's path.
void check_keys(const nlohmann::json& j, const std::vector<std::string>& keys, std::string_view ctx);
}  // namespace detail

// A field of the member `access` reaches (a pointer to data member, or a
// callable C& -> T&, for members of members). The flag defaults to the key's
// last component with - for _.
template <class C, class A>
SettingsField<C> setting_field(std::string key, std::string help, A access) {
  using T = std::remove_cvref_t<std::invoke_result_t<A, C&>>;
  SettingsField<C> f;
  f.flag = detail::flag_of(key);
  f.key = std::move(key);
  f.help = std::move(help);
  f.kind = detail::kind_of<T>();
  f.ref = [access](C& c) -> void* { return &std::invoke(access, c); };
  return f;
}

// An enum field: `values` and the name of each (`name_of`, the enum's own
// name function, so that the JSON and the options spell them as it does).
template <class C, class E, class A, class N>
SettingsField<C> setting_enum_field(std::string key, std::string help, A access, std::vector<E> values, N name_of) {
  static_assert(std::is_enum_v<E>);
  SettingsField<C> f;
  f.flag = detail::flag_of(key);
  f.key = std::move(key);
  f.help = std::move(help);
  f.kind = SettingKind::Enum;
  for (E v : values) f.names.emplace_back(name_of(v));
  f.get = [access, values](const C& c) {
    const E v = std::invoke(access, const_cast<C&>(c));
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i] == v) return static_cast<int>(i);
    return 0;
  };
  f.set = [access, values](C& c, int i) { std::invoke(access, c) = values.at(static_cast<size_t>(i)); };
  return f;
}

template <class C>
bool SettingsField<C>::set_name(C& c, std::string_view name) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) {
      set(c, static_cast<int>(i));
      return true;
    }
  return false;
}

// The fields of a member's table as fields of the outer struct: JSON keys
// prefixed with `prefix` ("optim." nests them in an object; "" keeps them
// flat), flags, help and bounds as they are.
template <class Outer, class Inner, class A>
SettingsTable<Outer> setting_nest(const SettingsTable<Inner>& inner, A access, const std::string& prefix) {
  SettingsTable<Outer> out;
  for (const SettingsField<Inner>& f : inner) {
    SettingsField<Outer> g;
    g.key = prefix + f.key;
    g.flag = f.flag;
    g.help = f.help;
    g.kind = f.kind;
    g.bounds = f.bounds;
    g.names = f.names;
    g.optional = f.optional;
    if (f.ref) g.ref = [r = f.ref, access](Outer& o) { return r(std::invoke(access, o)); };
    if (f.get) g.get = [r = f.get, access](const Outer& o) { return r(std::invoke(access, const_cast<Outer&>(o))); };
    if (f.set) g.set = [r = f.set, access](Outer& o, int i) { r(std::invoke(access, o), i); };
    out.push_back(std::move(g));
  }
  return out;
}

// The field of `t` with this JSON key (null if none).
template <class C>
SettingsField<C>* setting_find_field(SettingsTable<C>& t, std::string_view key) {
  for (SettingsField<C>& f : t)
    if (f.key == key) return &f;
  return nullptr;
}

// One line, "<ctx>: <key> must be >= 1, got 0", for the first field outside
// its bounds or (numbers) not finite.
template <class C>
void setting_check_bounds(const SettingsTable<C>& t, const C& c, std::string_view ctx) {
  for (const SettingsField<C>& f : t) {
    double v;
    switch (f.kind) {
      case SettingKind::Int: v = static_cast<double>(f.template at<int64_t>(c)); break;
      case SettingKind::UInt: v = static_cast<double>(f.template at<uint64_t>(c)); break;
      case SettingKind::Double: v = f.template at<double>(c); break;
      case SettingKind::Float: v = f.template at<float>(c); break;
      default: continue;
    }
    if (!std::isfinite(v)) detail::not_finite(ctx, f.key, v);
    if (f.bounds.any() && !f.bounds.contains(v)) detail::out_of_bounds(ctx, f.key, f.bounds, v);
  }
}

// Every field at its key (Enum as its name, Float widened to double).
template <class C>
nlohmann::json settings_to_json(const SettingsTable<C>& t, const C& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const SettingsField<C>& f : t) {
    nlohmann::json& s = detail::slot(j, f.key);
    switch (f.kind) {
      case SettingKind::Int: s = f.template at<int64_t>(c); break;
      case SettingKind::UInt: s = f.template at<uint64_t>(c); break;
      case SettingKind::Double: s = f.template at<double>(c); break;
      case SettingKind::Float: s = f.template at<float>(c); break;
      case SettingKind::Bool: s = f.template at<bool>(c); break;
      case SettingKind::String: s = f.template at<std::string>(c); break;
      case SettingKind::Strings: s = f.template at<std::vector<std::string>>(c); break;
      case SettingKind::Enum: s = f.enum_name(c); break;
    }
  }
  return j;
}

// Reads the fields of `t` from j into c (which holds the defaults): a missing
// key is an error unless the field is optional; unknown keys, wrong types and
// values outside the bounds are one-line errors naming the key.
template <class C>
void settings_from_json(const SettingsTable<C>& t, const nlohmann::json& j, C& c, std::string_view ctx) {
  std::vector<std::string> keys;
  for (const SettingsField<C>& f : t) keys.push_back(f.key);
  detail::check_keys(j, keys, ctx);
  for (const SettingsField<C>& f : t) {
    const nlohmann::json* v = detail::find(j, f.key);
    if (!v) {
      if (f.optional) continue;
      detail::missing(ctx, f.key);
    }
    switch (f.kind) {
      case SettingKind::Int: f.template at<int64_t>(c) = detail::read_int(*v, ctx, f.key); break;
      case SettingKind::UInt: f.template at<uint64_t>(c) = detail::read_uint(*v, ctx, f.key); break;
      case SettingKind::Double: f.template at<double>(c) = detail::read_number(*v, ctx, f.key); break;
      case SettingKind::Float: f.template at<float>(c) = static_cast<float>(detail::read_number(*v, ctx, f.key)); break;
      case SettingKind::Bool: f.template at<bool>(c) = detail::read_bool(*v, ctx, f.key); break;
      case SettingKind::String: f.template at<std::string>(c) = detail::read_string(*v, ctx, f.key); break;
      case SettingKind::Strings:
        f.template at<std::vector<std::string>>(c) = detail::read_strings(*v, ctx, f.key);
        break;
      case SettingKind::Enum: f.set(c, detail::read_enum(*v, f.names, ctx, f.key)); break;
    }
  }
  setting_check_bounds(t, c, ctx);
}

// `base` (a whole settings object, e.g. the defaults' settings_to_json) with
// the values of the keys `patch` names put over it: how a front end that is
// given only the settings a user changed (a Python dict) makes the whole
// object settings_from_json reads. An unknown key of `patch` is the same
// one-line error as settings_from_json's; values are left for it to check.
template <class C>
nlohmann::json settings_overlay(const SettingsTable<C>& t, nlohmann::json base, const nlohmann::json& patch,
                                std::string_view ctx) {
  std::vector<std::string> keys;
  for (const SettingsField<C>& f : t) keys.push_back(f.key);
  detail::check_keys(patch, keys, ctx);
  for (const SettingsField<C>& f : t)
    if (const nlohmann::json* v = detail::find(patch, f.key)) detail::slot(base, f.key) = *v;
  return base;
}

}  // namespace mxrl
