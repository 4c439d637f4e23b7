#include "io/safetensors.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "testing/errors.h"
#include "testing/files.h"
#include "util/error.h"

namespace mxrl {
namespace {

namespace fs = std::filesystem;
using test::slurp;

constexpr const char* kLabel = "model.safetensors";

// A file: 8-byte little-endian header length (`n`, default the header's
// size), the header text, then `data_bytes` bytes of data.
std::vector<std::byte> build(std::string_view header, size_t data_bytes = 0, std::optional<uint64_t> n = {}) {
  std::vector<std::byte> out;
  uint64_t len = n.value_or(header.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(len >> (8 * i)));
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<std::byte>(i * 31 + 7));
  return out;
}

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// The error File::parse reports for `bytes`, or "" if it parses.
std::string parse_error(const std::vector<std::byte>& bytes) {
  return test::error_of([&] { SafetensorsFile::parse(bytes, kLabel); });
}

// Parsing fails with one message "model.safetensors: ..." containing `phrase`.
void expect_error(const std::vector<std::byte>& bytes, std::string_view phrase) {
  std::string msg = parse_error(bytes);
  ASSERT_FALSE(msg.empty()) << "parsed, but expected an error containing: " << phrase;
  EXPECT_EQ(msg.rfind(std::string(kLabel) + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find(phrase), std::string::npos) << "message: " << msg << "\nexpected phrase: " << phrase;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// A fresh temporary directory per test.
class SafetensorsFiles : public test::TempDirTest {
 protected:
  bool dir_empty() const { return fs::is_empty(dir_); }
};

// ------------------------------------------------------------ dtypes

TEST(Safetensors, DTypeNamesRoundTrip) {
  const std::pair<DType, size_t> all[] = {
      {DType::F64, 8},     {DType::F32, 4}, {DType::F16, 2}, {DType::BF16, 2}, {DType::F8_E4M3, 1}, {DType::F8_E5M2, 1},
      {DType::F8_E8M0, 1}, {DType::U8, 1},  {DType::I8, 1},  {DType::I32, 4},  {DType::I64, 8}};
  for (auto [d, size] : all) {
    EXPECT_EQ(dtype_size(d), size) << dtype_name(d);
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
  }
  EXPECT_STREQ(dtype_name(DType::F8_E4M3), "F8_E4M3");
  EXPECT_STREQ(dtype_name(DType::BF16), "BF16");
  EXPECT_EQ(dtype_from_name("f32"), std::nullopt);
  EXPECT_EQ(dtype_from_name("BOOL"), std::nullopt);
}

// ------------------------------------------------------------ writer + reader

TEST_F(SafetensorsFiles, RoundTripsEveryDTypeWithMetadataScalarsAndZeroSize) {
  const DType all[] = {DType::F64,     DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2,
                       DType::F8_E8M0, DType::U8,  DType::I8,  DType::I32,  DType::I64};
  struct Expected {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> data;
  };
  std::vector<Expected> expected;
  int seed = 1;
  auto make = [&](std::string name, DType d, std::vector<int64_t> shape) {
    int64_t numel = 1;
    for (int64_t s : shape) numel *= s;
    std::vector<std::byte> data(numel * dtype_size(d));
    for (auto& b : data) b = static_cast<std::byte>(seed++ * 37);
    expected.push_back({std::move(name), d, std::move(shape), std::move(data)});
  };
  for (DType d : all) make(std::string("t_") + dtype_name(d), d, {2, 3});
  make("scalar", DType::F32, {});
  make("empty_rows", DType::BF16, {0, 5});
  make("odd", DType::U8, {3});  // misaligns everything after it
  make("empty_cols", DType::I64, {3, 0});
  make("after_odd", DType::F64, {1, 1, 2});

  SafetensorsWriter w;
  for (size_t i = 0; i < expected.size(); ++i) {
    const Expected& e = expected[i];
    if (i % 2)
      w.add(e.name, e.dtype, e.shape, e.data);
    else
      w.add_view(e.name, e.dtype, e.shape, e.data);
  }
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "h\xc3\xa9llo \"quoted\"\n"}, {"", ""}};
  w.set_metadata(meta);
  w.write(file("rt.safetensors"));

  SafetensorsFile f = SafetensorsFile::open(file("rt.safetensors"));
  EXPECT_EQ(f.path(), file("rt.safetensors"));
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.tensors().size(), expected.size());
  for (const Expected& e : expected) {
    const TensorView& t = f.at(e.name);
    EXPECT_EQ(&t, f.find(e.name));
    EXPECT_EQ(t.name, e.name);
    EXPECT_EQ(t.dtype, e.dtype) << e.name;
    EXPECT_EQ(t.shape, e.shape) << e.name;
    EXPECT_EQ(t.numel() * int64_t(dtype_size(t.dtype)), int64_t(t.data.size())) << e.name;
    EXPECT_TRUE(std::equal(t.data.begin(), t.data.end(), e.data.begin(), e.data.end())) << e.name;
  }
  EXPECT_EQ(f.at("scalar").numel(), 1);
  EXPECT_EQ(f.at("empty_rows").numel(), 0);
  // Non-empty tensors come back in data-offset order, which is the order added.
  std::vector<std::string> order, added;
  for (const auto& t : f.tensors())
    if (!t.data.empty()) order.push_back(t.name);
  for (const auto& e : expected)
    if (!e.data.empty()) added.push_back(e.name);
  EXPECT_EQ(order, added);
  for (size_t i = 1; i < f.tensors().size(); ++i) EXPECT_LE(f.tensors()[i - 1].data.data(), f.tensors()[i].data.data());
}

TEST_F(SafetensorsFiles, HeaderIsPaddedSoDataStartsAligned) {
  // Names of every length mod 8 exercise every amount of padding.
  for (int len = 1; len <= 8; ++len) {
    SafetensorsWriter w;
    w.add(std::string(len, 'x'), DType::U8, {1}, {std::byte{42}});
    w.write(file("p.safetensors"));
    std::string raw = slurp(file("p.safetensors"));
    ASSERT_GE(raw.size(), 8u);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(raw[i]);
    EXPECT_EQ((8 + n) % 8, 0u) << len;
    EXPECT_EQ(raw.size(), 8 + n + 1) << len;
    EXPECT_EQ(raw.back(), 42);
    std::string header = raw.substr(8, n);
    EXPECT_EQ(header.front(), '{');
    EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));  // only spaces after the JSON
    EXPECT_EQ(SafetensorsFile::open(file("p.safetensors")).at(std::string(len, 'x')).data.size(), 1u);
  }
}

TEST_F(SafetensorsFiles, EmptyWriterWritesAValidFile) {
  SafetensorsWriter().write(file("e.safetensors"));
  EXPECT_EQ(slurp(file("e.safetensors")), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  SafetensorsFile f = SafetensorsFile::open(file("e.safetensors"));
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.metadata().empty());
}

// The exact bytes the reference implementation writes for
//   save_file({"b": tensor([1., 2.]), "a": tensor([1, 2, 3], dtype=uint8)}, metadata={"format": "pt"})
// (it sorts by alignment then name, puts __metadata__ first and pads with spaces).
TEST(Safetensors, ParsesReferenceLayout) {
  const char header[] = R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("a":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}}      )";
  static_assert(sizeof(header) - 1 == 0x90);
  std::string raw("\x90\0\0\0\0\0\0\0", 8);
  raw += header;
  raw += std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f little-endian
  raw += "\x01\x02\x03";
  std::vector<std::byte> bytes = bytes_of(raw);

  SafetensorsFile f = SafetensorsFile::parse(bytes, "ref.safetensors");
  EXPECT_EQ(f.path(), "ref.safetensors");
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "b");
  EXPECT_EQ(f.tensors()[1].name, "a");
  const TensorView& b = f.at("b");
  EXPECT_EQ(b.dtype, DType::F32);
  EXPECT_EQ(b.shape, std::vector<int64_t>{2});
  float vals[2];
  ASSERT_EQ(b.data.size(), sizeof(vals));
  std::memcpy(vals, b.data.data(), sizeof(vals));
  EXPECT_EQ(vals[0], 1.0f);
  EXPECT_EQ(vals[1], 2.0f);
  EXPECT_EQ(b.data.data(), bytes.data() + 8 + 0x90);  // views point into the buffer
  const TensorView& a = f.at("a");
  EXPECT_EQ(a.dtype, DType::U8);
  ASSERT_EQ(a.data.size(), 3u);
  EXPECT_EQ(a.data[2], std::byte{3});
}

TEST(Safetensors, AcceptsZeroSizeScalarsAndHeaderPadding) {
  // Zero-size tensors may sit anywhere a tensor boundary is, including the end.
  SafetensorsFile f = SafetensorsFile::parse(build(R"({"z0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                                                   R"("s":{"dtype":"I32","shape":[],"data_offsets":[0,4]},)"
                                                   R"("z1":{"dtype":"BF16","shape":[2,0,3],"data_offsets":[4,4]},)"
                                                   R"("z2":{"dtype":"I8","shape":[0],"data_offsets":[4,4]}} )"
                                                   "\t\r\n  ",
                                                   4),
                                             kLabel);
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensors()[0].name, "z0");
  EXPECT_EQ(f.tensors()[1].name, "s");
  EXPECT_EQ(f.at("s").shape, std::vector<int64_t>{});
  EXPECT_EQ(f.at("s").numel(), 1);
  EXPECT_EQ(f.at("z1").numel(), 0);
  EXPECT_TRUE(f.at("z2").data.empty());
  // A header with only metadata, and "-0" as an integer.
  SafetensorsFile g = SafetensorsFile::parse(
      build(R"({"__metadata__":{},"z":{"dtype":"U8","shape":[-0],"data_offsets":[0,-0]}})"), kLabel);
  EXPECT_EQ(g.at("z").shape, std::vector<int64_t>{0});
}

TEST(Safetensors, LookupAndMove) {
  std::vector<std::byte> bytes = build(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2);
  SafetensorsFile f = SafetensorsFile::parse(bytes, kLabel);
  EXPECT_EQ(f.find("nope"), nullptr);
  try {
    f.at("nope");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "model.safetensors: no tensor 'nope'");
  }
  const TensorView* w = f.find("w");
  SafetensorsFile g = std::move(f);
  EXPECT_EQ(g.find("w"), w);  // views survive moves
  SafetensorsFile h = SafetensorsFile::parse(build("{}"), "other");
  h = std::move(g);
  EXPECT_EQ(h.path(), kLabel);
  EXPECT_EQ(h.at("w").data.data(), bytes.data() + bytes.size() - 2);
}

TEST_F(SafetensorsFiles, OpenErrors) {
  auto open_error = [](const std::string& path) { return test::error_of([&] { SafetensorsFile::open(path); }); };
  EXPECT_EQ(open_error(file("missing")), file("missing") + ": cannot open: No such file or directory");
  EXPECT_EQ(open_error(dir_.string()), dir_.string() + ": not a regular file");
  std::ofstream(file("empty")).close();
  EXPECT_NE(open_error(file("empty")).find(file("empty") + ": file is too short (0 bytes)"), std::string::npos);
}

// ------------------------------------------------------------ malformed headers

const char* kGood = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";

TEST(SafetensorsMalformed, BaselineIsValid) { EXPECT_EQ(parse_error(build(kGood, 24)), ""); }

TEST(SafetensorsMalformed, FileShorterThanLengthPrefix) {
  expect_error(bytes_of(std::string_view("\x02\0\0\0", 4)), "file is too short (4 bytes)");
  expect_error({}, "file is too short (0 bytes)");
}

TEST(SafetensorsMalformed, HeaderLengthBeyondFile) {
  expect_error(build("{}", 0, 3), "header length 3 exceeds the file size (2 bytes");
  expect_error(build("{}", 0, ~uint64_t{0}), "header too large");
}

TEST(SafetensorsMalformed, HeaderTooLarge) { expect_error(build("{}", 0, 100'000'001), "header too large"); }

TEST(SafetensorsMalformed, HeaderNotJson) {
  expect_error(build(R"({"w":{"dtype":"F32",)"), "header is not valid JSON: [json.exception.parse_error");
  expect_error(build(""), "header is not valid JSON");
  expect_error(build("{} x"), "header is not valid JSON");
  expect_error(build("{\"w\xff\":1}"), "header is not valid JSON");  // ill-formed UTF-8
  expect_error(build(std::string("{}\0junk", 7)), "header is not valid JSON: NUL byte at offset 2");
}

TEST(SafetensorsMalformed, HeaderNotObject) {
  expect_error(build("[1, 2]"), "header is not a JSON object (it is array)");
  expect_error(build("\"str\""), "header is not a JSON object (it is string)");
  expect_error(build(" {}"), "header does not start with '{'");
  expect_error(build("\xef\xbb\xbf{}"), "header does not start with '{'");  // BOM
}

TEST(SafetensorsMalformed, DuplicateKeys) {
  expect_error(build(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
                     R"("w":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})"),
               "duplicate key 'w' in the header");
  expect_error(build(R"({"w":{"dtype":"U8","dtype":"I8","shape":[0],"data_offsets":[0,0]}})"),
               "duplicate key 'dtype' in the entry for 'w'");
  expect_error(build(R"({"__metadata__":{"a":"1","a":"2"}})"), "duplicate key 'a' in the entry for '__metadata__'");
  expect_error(build(R"({"__metadata__":{},"__metadata__":{}})"), "duplicate key '__metadata__' in the header");
}

TEST(SafetensorsMalformed, EntryNotObject) {
  expect_error(build(R"({"w":[0,1]})"), "tensor 'w': entry is not a JSON object (it is array)");
}

TEST(SafetensorsMalformed, MissingOrExtraKeys) {
  expect_error(build(R"({"w":{"dtype":"U8","shape":[0]}})"), "tensor 'w': missing key 'data_offsets'");
  expect_error(build(R"({"w":{"shape":[0],"data_offsets":[0,0]}})"), "tensor 'w': missing key 'dtype'");
  expect_error(build(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"foo":1}})"),
               "tensor 'w': unexpected key 'foo'");
}

TEST(SafetensorsMalformed, WrongJsonTypes) {
  expect_error(build(R"({"w":{"dtype":4,"shape":[0],"data_offsets":[0,0]}})"), "tensor 'w': 'dtype' is not a string");
  expect_error(build(R"({"w":{"dtype":"U8","shape":{},"data_offsets":[0,0]}})"),
               "tensor 'w': 'shape' is not an array (it is object)");
  expect_error(build(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":"0-0"}})"),
               "tensor 'w': data_offsets \"0-0\" is not two non-negative integers");
}

TEST(SafetensorsMalformed, UnknownDType) {
  expect_error(build(R"({"w":{"dtype":"F128","shape":[0],"data_offsets":[0,0]}})"),
               "tensor 'w': unknown or unsupported dtype 'F128'");
  expect_error(build(R"({"w":{"dtype":"f32","shape":[0],"data_offsets":[0,0]}})"), "unsupported dtype 'f32'");
}

TEST(SafetensorsMalformed, BadShapeEntries) {
  expect_error(build(R"({"w":{"dtype":"U8","shape":[2,-1],"data_offsets":[0,0]}})"),
               "tensor 'w': shape entry 1 is negative (-1)");
  expect_error(build(R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,0]}})"),
               "tensor 'w': shape entry 0 is not a non-negative 64-bit integer (1.5)");
  expect_error(build(R"({"w":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}})"), "shape entry 0 is not");
  expect_error(build(R"({"w":{"dtype":"U8","shape":["2"],"data_offsets":[0,2]}})"), "shape entry 0 is not");
  expect_error(build(R"({"w":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,0]}})"),
               "shape entry 0 is not a non-negative 64-bit integer (9223372036854775808)");
  // Quoted header contents are cut short.
  std::string junk(10000, 'j');
  std::string msg = parse_error(build(R"({"w":{"dtype":"U8","shape":[")" + junk + R"("],"data_offsets":[0,0]}})"));
  EXPECT_NE(msg.find("shape entry 0 is not a non-negative 64-bit integer (\"jjj"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 200u);
  msg = parse_error(build("{\"" + junk + "\":1}"));
  EXPECT_NE(msg.find("tensor 'jjj"), std::string::npos);
  EXPECT_LT(msg.size(), 300u);
}

TEST(SafetensorsMalformed, ByteSizeOverflow) {
  expect_error(build(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
               "tensor 'w': shape [4294967296, 4294967296] of F32 is too large (its byte size overflows 64 bits)");
  // numel fits but numel * 8 does not fit in int64.
  expect_error(build(R"({"w":{"dtype":"I64","shape":[2305843009213693952],"data_offsets":[0,0]}})"), "overflows");
  // A zero anywhere makes the tensor empty, however large the other dimensions.
  EXPECT_EQ(parse_error(build(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})")), "");
}

TEST(SafetensorsMalformed, BadDataOffsets) {
  for (const char* offsets : {"[0]", "[0,1,2]", "[-1,0]", "[0,1.0]", "[0,\"1\"]", "null"}) {
    expect_error(build(fmt::format(R"({{"w":{{"dtype":"U8","shape":[1],"data_offsets":{}}}}})", offsets), 1),
                 "tensor 'w': data_offsets " + nlohmann::json::parse(offsets).dump() +
                     " is not two non-negative integers [begin, end]");
  }
  expect_error(build(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4),
               "tensor 'w': data_offsets [4, 0] have begin > end");
}

TEST(SafetensorsMalformed, OffsetsBeyondDataRegion) {
  expect_error(build(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 20),
               "tensor 'w': data_offsets [0, 24] extend beyond the data region (20 bytes)");
  expect_error(build(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}})"),
               "extend beyond the data region (0 bytes)");
}

TEST(SafetensorsMalformed, SizeMismatchWithShape) {
  EXPECT_EQ(parse_error(build(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12]}})", 12)),
            "model.safetensors: tensor 'w': data_offsets [0, 12] hold 12 bytes but shape [2, 3] of F32 needs 24");
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  expect_error(build(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                     12),
               "tensors 'a' and 'b' overlap (data_offsets [0, 8] and [4, 12])");
  expect_error(build(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})",
                     8),
               "tensors 'a' and 'b' overlap");
  // A zero-size tensor strictly inside another one overlaps it too.
  expect_error(build(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                     R"("z":{"dtype":"U8","shape":[0],"data_offsets":[3,3]}})",
                     8),
               "tensors 'a' and 'z' overlap");
}

TEST(SafetensorsMalformed, GapsAndLeadingBytes) {
  expect_error(build(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})",
                     12),
               "gap of 4 unused bytes between tensors 'a' and 'b'");
  expect_error(build(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6),
               "2 unused bytes before the first tensor 'a'");
}

TEST(SafetensorsMalformed, TrailingGarbage) {
  expect_error(build(kGood, 25), "trailing garbage: 1 bytes after the last tensor (the data region is 25 bytes)");
  expect_error(build("{}", 3), "trailing garbage: 3 bytes");
}

TEST(SafetensorsMalformed, BadMetadata) {
  expect_error(build(R"({"__metadata__":["a"]})"), "__metadata__ is not a JSON object (it is array)");
  expect_error(build(R"({"__metadata__":{"k":1}})"), "__metadata__ value for key 'k' is not a string (it is number)");
  expect_error(build(R"({"__metadata__":{"k":null}})"), "__metadata__ value for key 'k' is not a string");
}

TEST(SafetensorsMalformed, NamesWithControlCharactersStayOnOneLine) {
  // "\n" in the JSON is a newline in the name; the message escapes it.
  expect_error(build(R"({"a\nb":1})"), "tensor 'a\\x0ab': entry is not a JSON object");
}

// ------------------------------------------------------------ writer errors

TEST_F(SafetensorsFiles, WriterErrorsLeaveNoOutput) {
  struct Case {
    const char* what;
    std::function<void(SafetensorsWriter&)> fill;
    std::string phrase;
  };
  std::vector<std::byte> six(6);
  const Case cases[] = {
      {"size mismatch",
       [&](SafetensorsWriter& w) {
         w.add("w", DType::F32, {2, 3}, six);
       },
       "tensor 'w': 6 bytes of data but shape [2, 3] of F32 needs 24"},
      {"view size mismatch", [&](SafetensorsWriter& w) { w.add_view("v", DType::U8, {5}, six); },
       "tensor 'v': 6 bytes of data but shape [5] of U8 needs 5"},
      {"duplicate",
       [&](SafetensorsWriter& w) {
         w.add("w", DType::U8, {6}, six);
         w.add("x", DType::U8, {6}, six);
         w.add("w", DType::U8, {6}, six);
       },
       "tensor 'w': duplicate tensor name"},
      {"reserved name", [&](SafetensorsWriter& w) { w.add("__metadata__", DType::U8, {6}, six); }, "reserved"},
      {"negative shape",
       [&](SafetensorsWriter& w) {
         w.add("n", DType::U8, {-1, -6}, six);
       },
       "negative"},
      {"overflow", [&](SafetensorsWriter& w) { w.add("o", DType::F64, {int64_t(1) << 61}, {}); }, "overflows"},
      {"bad UTF-8", [&](SafetensorsWriter& w) { w.add("\xff", DType::U8, {6}, six); }, "cannot encode the header"},
  };
  for (const Case& c : cases) {
    SafetensorsWriter w;
    w.add("ok", DType::U8, {6}, six);
    c.fill(w);
    std::string path = file("out.safetensors");
    try {
      w.write(path);
      ADD_FAILURE() << c.what << ": expected an error";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
      EXPECT_NE(msg.find(c.phrase), std::string::npos) << c.what << ": " << msg;
    }
    EXPECT_TRUE(dir_empty()) << c.what;
  }
  // An existing file survives a failed write untouched.
  SafetensorsWriter good;
  good.add("ok", DType::U8, {6}, six);
  good.write(file("out.safetensors"));
  std::string before = slurp(file("out.safetensors"));
  SafetensorsWriter bad;
  bad.add("w", DType::F32, {2}, six);
  EXPECT_THROW(bad.write(file("out.safetensors")), Error);
  EXPECT_EQ(slurp(file("out.safetensors")), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

// ------------------------------------------------------------ committed corpora

// Every file in tests/data/safetensors_bad is listed in EXPECTED.tsv with a
// phrase its error must contain, and fails with exactly that.
TEST(SafetensorsCorpus, MalformedFilesFailWithExpectedMessages) {
  fs::path dir = fs::path(MXRL_SOURCE_DIR) / "tests/data/safetensors_bad";
  std::ifstream tsv(dir / "EXPECTED.tsv");
  ASSERT_TRUE(tsv) << dir / "EXPECTED.tsv";
  std::set<std::string> listed;
  std::string line;
  while (std::getline(tsv, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << "no TAB in EXPECTED.tsv line: " << line;
    std::string name = line.substr(0, tab), phrase = line.substr(tab + 1);
    ASSERT_FALSE(phrase.empty()) << line;
    EXPECT_TRUE(listed.insert(name).second) << "listed twice: " << name;
    std::string path = (dir / name).string();
    ASSERT_TRUE(fs::is_regular_file(path)) << "listed but missing: " << path;
    try {
      SafetensorsFile::open(path);
      ADD_FAILURE() << path << " parsed, expected an error containing: " << phrase;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
      EXPECT_NE(msg.find(phrase), std::string::npos) << name << ": " << msg << "\nexpected: " << phrase;
    }
  }
  EXPECT_GE(listed.size(), 20u);
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") {
      EXPECT_TRUE(listed.count(e.path().filename().string())) << "not in EXPECTED.tsv: " << e.path();
    }
  }
}

// The fuzzer's seeds must be valid, or they seed nothing useful.
TEST(SafetensorsCorpus, FuzzSeedsAreValid) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(fs::path(MXRL_SOURCE_DIR) / "fuzz/corpus")) {
    EXPECT_NO_THROW(SafetensorsFile::open(e.path().string())) << e.path();
    ++n;
  }
  EXPECT_GE(n, 3);
}

}  // namespace
}  // namespace mxrl
