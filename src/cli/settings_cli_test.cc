// A settings table as CLI11 options (cli/settings_cli.h) and the --config
// file (cli/config_file.h), on a small struct: bounds give short messages,
// enums bind by name, TOML keys set the fields unless a flag is given, bad
// TOML is one line naming the file and the key, --resume refusals come from
// the table.
#include "cli/settings_cli.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "cli/config_file.h"
#include "util/error.h"

namespace mxrl {
namespace {
namespace fs = std::filesystem;

enum class Mode { Fast, Slow };
const char* mode_name(Mode m) { return m == Mode::Fast ? "fast" : "slow"; }

struct Cfg {
  int64_t steps = 4;
  double lr = 1e-4, ratio = 0.5;
  bool hybrid = false;
  Mode mode = Mode::Fast;
  std::vector<std::string> inject;
  int64_t hidden = 9;
};

const SettingsTable<Cfg>& cfg_fields() {
  static const SettingsTable<Cfg> t = {
      setting_field<Cfg>("steps", "Steps", &Cfg::steps).min(1),
      setting_field<Cfg>("lr", "Learning rate", &Cfg::lr).above(0),
      setting_field<Cfg>("ratio", "Ratio", &Cfg::ratio).range(0, 1),
      setting_field<Cfg>("hybrid", "Hybrid", &Cfg::hybrid),
      setting_enum_field<Cfg>("mode", "Mode", &Cfg::mode, std::vector<Mode>{Mode::Fast, Mode::Slow}, mode_name),
      setting_field<Cfg>("inject", "Faults", &Cfg::inject),
      setting_field<Cfg>("hidden", "No option", &Cfg::hidden).no_cli(),
  };
  return t;
}

struct Parsed {
  Cfg cfg;
  std::string error;  // CLI11's or mxrl's message; "" when it parsed
  std::vector<std::string> given;
};

// Parses `args` (after the command name) with the table's options and --config.
Parsed parse(std::vector<std::string> args, bool resume = false) {
  Parsed p;
  CLI::App app("test");
  std::string config;
  app.add_option("--config", config);
  add_options(&app, p.cfg, cfg_fields());
  std::reverse(args.begin(), args.end());  // CLI11 takes them reversed
  try {
    app.parse(args);
    if (!config.empty()) apply_config_file(&app, config);
    p.given = given_flags(&app, cfg_fields());
    if (resume) refuse_on_resume(&app, cfg_fields(), {"--config"});
  } catch (const CLI::ParseError& e) {
    p.error = e.what();
  } catch (const Error& e) {
    p.error = e.what();
  }
  return p;
}

std::string write_toml(const std::string& text) {
  const std::string path =
      (fs::temp_directory_path() / ("settings_cli_test_" + std::to_string(::getpid()) + ".toml")).string();
  std::ofstream(path) << text;
  return path;
}

TEST(SettingsCli, OptionsBindTheFieldsWithTheirDefaults) {
  const Parsed p = parse({"--steps", "7", "--lr", "0.5", "--hybrid", "--mode", "slow", "--inject", "a", "b"});
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.cfg.steps, 7);
  EXPECT_EQ(p.cfg.lr, 0.5);
  EXPECT_TRUE(p.cfg.hybrid);
  EXPECT_EQ(p.cfg.mode, Mode::Slow);
  EXPECT_EQ(p.cfg.inject, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(p.cfg.ratio, 0.5);                    // not given: the struct's default
  EXPECT_NE(parse({"--hidden", "1"}).error, "");  // no option
  CLI::App app("test");
  Cfg c;
  add_options(&app, c, cfg_fields());
  const std::string help = app.help();
  EXPECT_NE(help.find("0.0001"), std::string::npos) << help;  // the default shown
  EXPECT_NE(help.find("fast"), std::string::npos) << help;
}

TEST(SettingsCli, BoundsGiveShortMessages) {
  EXPECT_EQ(parse({"--steps", "0"}).error, "--steps: must be >= 1, got 0");
  EXPECT_EQ(parse({"--lr", "0"}).error, "--lr: must be > 0, got 0");
  EXPECT_EQ(parse({"--ratio", "2"}).error, "--ratio: must be in [0, 1], got 2");
  EXPECT_EQ(parse({"--steps", "1"}).error, "");
  EXPECT_NE(parse({"--mode", "medium"}).error.find("--mode"), std::string::npos);
  // The validators for other commands' options.
  CLI::App app("test");
  int64_t n = 0;
  double x = 0;
  app.add_option("--n", n)->check(at_least(1));
  app.add_option("--x", x)->check(positive());
  app.add_option("--m", n)->check(non_negative());
  auto err = [&](std::vector<std::string> a) {
    try {
      app.parse(a);
    } catch (const CLI::ParseError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(err({"0", "--n"}), "--n: must be >= 1, got 0");
  EXPECT_EQ(err({"0", "--x"}), "--x: must be > 0, got 0");
  EXPECT_EQ(err({"-1", "--m"}), "--m: must be >= 0, got -1");
}

TEST(SettingsCli, ConfigFileSetsTheFieldsAndFlagsWin) {
  const std::string f = write_toml("steps = 3\nlr = 0.25\nhybrid = true\nmode = \"slow\"\ninject = [\"x\", \"y\"]\n");
  Parsed p = parse({"--config", f, "--steps", "5"});
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.cfg.steps, 5);  // the flag beat the file
  EXPECT_EQ(p.cfg.lr, 0.25);
  EXPECT_TRUE(p.cfg.hybrid);
  EXPECT_EQ(p.cfg.mode, Mode::Slow);
  EXPECT_EQ(p.cfg.inject, (std::vector<std::string>{"x", "y"}));
  fs::remove(f);
}

TEST(SettingsCli, BadConfigIsOneLineNamingTheFileAndKey) {
  struct Case {
    std::string toml, expect;
  } cases[] = {{"bogus = 1\n", "unknown key 'bogus'"},
               {"hidden = 1\n", "unknown key 'hidden'"},
               {"steps = 2.5\n", "key 'steps': expected an integer"},
               {"steps = 0\n", "key 'steps': --steps: must be >= 1, got 0"},
               {"lr = \"big\"\n", "key 'lr': expected a number"},
               {"hybrid = 1\n", "key 'hybrid': expected true or false"},
               {"mode = 2\n", "key 'mode': expected a string"},
               {"mode = \"medium\"\n", "key 'mode'"},
               {"steps = [1, 2]\n", "key 'steps': expected a single value"},
               {"steps = 1\nsteps = 2\n", ":2:"}};
  for (const Case& c : cases) {
    const std::string f = write_toml(c.toml);
    const std::string e = parse({"--config", f}).error;
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.toml << " -> " << e;
    EXPECT_NE(e.find(f), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    fs::remove(f);
  }
}

TEST(SettingsCli, ResumeRefusesEveryFieldGivenWhetherByFlagOrByConfig) {
  for (const SettingsField<Cfg>& f : cfg_fields()) {
    if (f.flag.empty()) continue;
    std::vector<std::string> args = {"--" + f.flag};
    if (f.kind == SettingKind::Enum)
      args.push_back("slow");
    else if (f.kind != SettingKind::Bool)
      args.push_back("1");
    const Parsed p = parse(args, /*resume=*/true);
    EXPECT_EQ(p.error, "--resume continues a run with its original settings; --" + f.flag + " cannot be changed");
  }
  EXPECT_EQ(parse({}, true).error, "");
  const std::string f = write_toml("lr = 0.5\n");  // a setting from the file is refused too
  EXPECT_EQ(parse({"--config", f}, true).error,
            "--resume continues a run with its original settings; --lr cannot be changed");
  fs::remove(f);
  EXPECT_EQ(parse({"--lr", "0.5"}).given, (std::vector<std::string>{"--lr"}));
}

}  // namespace
}  // namespace mxrl
