// The settings-table facility on a small struct: JSON out and in (nested
// keys, enums, optional keys), one-line errors naming the key for unknown
// keys, wrong types and values outside the bounds.
#include "util/settings.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "testing/errors.h"
#include "util/error.h"

namespace mxrl {
namespace {
using test::error_of;

using nlohmann::json;

enum class Color { Red, Green };
const char* color_name(Color c) { return c == Color::Red ? "red" : "green"; }

struct Inner {
  double rate = 0.5;
  bool on = false;
};
struct Toy {
  int64_t steps = 3;
  uint64_t seed = 7;
  float temp = 1.0f;
  std::string name = "x";
  std::vector<std::string> tags;
  Color color = Color::Green;
  Inner inner;
  int64_t added_later = 1;
};

const SettingsTable<Toy>& toy_fields() {
  static const SettingsTable<Toy> t = [] {
    SettingsTable<Toy> t = {
        setting_field<Toy>("steps", "Steps", &Toy::steps).min(1),
        setting_field<Toy>("seed", "Seed", &Toy::seed),
        setting_field<Toy>("temp", "Temperature", &Toy::temp).above(0),
        setting_field<Toy>("name", "Name", &Toy::name),
        setting_field<Toy>("tags", "Tags", &Toy::tags),
        setting_enum_field<Toy>("color", "Color", &Toy::color, std::vector<Color>{Color::Red, Color::Green},
                                color_name),
        setting_field<Toy>("added_later", "Added later", &Toy::added_later).optional_key().no_cli(),
    };
    SettingsTable<Inner> in = {setting_field<Inner>("rate", "Rate", &Inner::rate).range(0, 1).cli("inner-rate"),
                               setting_field<Inner>("on", "On", &Inner::on)};
    for (auto& f : setting_nest<Toy>(in, &Toy::inner, "inner.")) t.push_back(std::move(f));
    return t;
  }();
  return t;
}

Toy from(const json& j) {
  Toy t;
  settings_from_json(toy_fields(), j, t, "toy settings");
  return t;
}

TEST(Settings, JsonRoundTripWithNestedKeysEnumsAndDefaults) {
  Toy t;
  t.steps = 12, t.seed = ~uint64_t{0}, t.temp = 0.7f, t.name = "n", t.tags = {"a", "b"}, t.color = Color::Red;
  t.inner.rate = 1.0 / 3, t.inner.on = true;
  const json j = settings_to_json(toy_fields(), t);
  EXPECT_EQ(j["color"], "red");
  EXPECT_EQ(j["inner"]["rate"], 1.0 / 3);
  EXPECT_EQ(j["temp"].get<double>(), static_cast<double>(0.7f));  // widened as nlohmann widens a float
  EXPECT_EQ(j["seed"].get<uint64_t>(), ~uint64_t{0});
  const Toy u = from(json::parse(j.dump()));
  EXPECT_EQ(settings_to_json(toy_fields(), u), j);
  EXPECT_EQ(u.temp, 0.7f);
  // The flags: the last key component with - for _, unless named.
  EXPECT_EQ(toy_fields()[0].flag, "steps");
  EXPECT_EQ(setting_find_field(const_cast<SettingsTable<Toy>&>(toy_fields()), "inner.rate")->flag, "inner-rate");
  EXPECT_EQ(setting_find_field(const_cast<SettingsTable<Toy>&>(toy_fields()), "inner.on")->flag, "on");
  // An optional key may be missing (a state saved before it existed); the default stays.
  json old = j;
  old.erase("added_later");
  EXPECT_EQ(from(old).added_later, 1);
}

TEST(Settings, BadJsonIsOneLineNamingTheKey) {
  const json good = settings_to_json(toy_fields(), Toy{});
  auto err = [&](auto mutate) {
    json j = good;
    mutate(j);
    return error_of([&] { from(j); });
  };
  EXPECT_EQ(err([](json& j) { j.erase("steps"); }), "toy settings: missing \"steps\"");
  EXPECT_EQ(err([](json& j) { j["inner"].erase("on"); }), "toy settings: missing \"inner.on\"");
  EXPECT_EQ(err([](json& j) { j["bogus"] = 1; }), "toy settings: unknown key 'bogus'");
  EXPECT_EQ(err([](json& j) { j["inner"]["bogus"] = 1; }), "toy settings: unknown key 'inner.bogus'");
  EXPECT_EQ(err([](json& j) { j["steps"] = 2.5; }), "toy settings: steps must be an integer, got 2.5 (number)");
  EXPECT_EQ(err([](json& j) { j["seed"] = -1; }), "toy settings: seed must be >= 0, got -1");
  EXPECT_EQ(err([](json& j) { j["inner"]["on"] = "yes"; }),
            "toy settings: inner.on must be true or false, got \"yes\" (string)");
  EXPECT_EQ(err([](json& j) { j["color"] = "blue"; }),
            "toy settings: color must be one of \"red\", \"green\", got \"blue\" (string)");
  EXPECT_EQ(err([](json& j) { j["tags"] = "a"; }),
            "toy settings: tags must be an array of strings, got \"a\" (string)");
  EXPECT_EQ(err([](json& j) { j["inner"] = 3; }), "toy settings: inner must be an object, got 3 (number)");
  EXPECT_EQ(err([](json& j) { j["steps"] = 0; }), "toy settings: steps must be >= 1, got 0");
  EXPECT_EQ(err([](json& j) { j["inner"]["rate"] = 1.5; }), "toy settings: inner.rate must be in [0, 1], got 1.5");
  EXPECT_EQ(error_of([] { from(json::array()); }), "toy settings: expected a JSON object, got array");
}

TEST(Settings, OverlaySetsOnlyTheGivenKeysOverTheBase) {
  const json base = settings_to_json(toy_fields(), Toy{});
  auto overlay = [&](const json& patch) { return settings_overlay(toy_fields(), base, patch, "toy settings"); };
  const Toy t = from(overlay({{"steps", 9}, {"inner", {{"on", true}}}}));
  EXPECT_EQ(t.steps, 9);
  EXPECT_TRUE(t.inner.on);
  EXPECT_EQ(t.inner.rate, 0.5);  // a sibling of a given nested key keeps its base value
  EXPECT_EQ(t.name, "x");
  EXPECT_EQ(overlay(json::object()), base);
  EXPECT_EQ(error_of([&] { overlay({{"bogus", 1}}); }), "toy settings: unknown key 'bogus'");
  EXPECT_EQ(error_of([&] { overlay({{"inner", {{"bogus", 1}}}}); }), "toy settings: unknown key 'inner.bogus'");
  // Values are settings_from_json's to check, with its messages.
  EXPECT_EQ(error_of([&] {
              from(overlay({{"steps", "3"}}));
            }),
            "toy settings: steps must be an integer, got \"3\" (string)");
}

TEST(Settings, BoundsAreOneLineEach) {
  auto err = [](auto mutate) {
    Toy t;
    mutate(t);
    return error_of([&] { setting_check_bounds(toy_fields(), t, "toy settings"); });
  };
  EXPECT_EQ(err([](Toy&) {}), "");
  EXPECT_EQ(err([](Toy& t) { t.steps = 0; }), "toy settings: steps must be >= 1, got 0");
  EXPECT_EQ(err([](Toy& t) { t.temp = 0; }), "toy settings: temp must be > 0, got 0");
  EXPECT_EQ(err([](Toy& t) { t.temp = NAN; }), "toy settings: temp must be a finite number, got nan");
  EXPECT_EQ(err([](Toy& t) { t.inner.rate = -0.5; }), "toy settings: inner.rate must be in [0, 1], got -0.5");
  EXPECT_EQ((SettingBounds{0, 1, false, true}.text()), "must be in [0, 1)");
  EXPECT_EQ(SettingBounds{}.text(), "");
  EXPECT_FALSE(SettingBounds{}.any());
  EXPECT_FALSE(SettingBounds{0}.contains(NAN));
}

}  // namespace
}  // namespace mxrl
