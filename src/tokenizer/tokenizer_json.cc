// tokenizer.json: validation into an Impl, and back to text.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "tokenizer/tokenizer_impl.h"
#include "util/error.h"

namespace mxrl::detail {

namespace {

using json = nlohmann::json;

constexpr int kMaxNesting = 16;  // Sequence normalizers / pre-tokenizers
constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max() - 1;

// A token or pattern quoted for an error message (shortened when long).
std::string quote(std::string_view s) {
  std::string q = s.size() > 60 ? std::string(s.substr(0, 57)) + "..." : std::string(s);
  return json(utf8_lossy(q)).dump();
}

// Builds the DOM of a tokenizer.json, except for model.vocab and model.merges
// (hundreds of thousands of entries), which go straight into a Vocab and a
// list of pairs: a full DOM made loading Qwen's tokenizer several times slower.
class Loader : public nlohmann::json_sax<json> {
 public:
  explicit Loader(const std::string& label) : label_(label) {}

  json root;
  Vocab vocab;                                              // model.vocab, when an object
  std::vector<std::pair<std::string, std::string>> merges;  // model.merges, when an array
  int32_t max_vocab_id = -1;
  const std::string& error() const { return error_; }

  bool null() override { return scalar(json(nullptr)); }
  bool boolean(bool v) override { return scalar(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::Vocab) return v < 0 ? bad_id(std::to_string(v)) : vocab_entry(uint64_t(v));
    return scalar(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::Vocab) return vocab_entry(v);
    return scalar(json(v));
  }
  bool number_float(number_float_t v, const string_t& text) override {
    if (mode_ == Mode::Vocab) return bad_id(text);
    return scalar(json(v));
  }
  bool string(string_t& v) override {
    if (mode_ == Mode::Merges) {  // "a b"
      const size_t sp = v.find(' ');
      if (sp == std::string::npos || v.find(' ', sp + 1) != std::string::npos)
        return fail_at(fmt::format("model.merges[{}]", merges.size()),
                       fmt::format("expected two tokens separated by one space, got {}", quote(v)));
      merges.emplace_back(v.substr(0, sp), v.substr(sp + 1));
      return true;
    }
    if (mode_ == Mode::MergePair) {  // ["a", "b"]
      if (pair_count_ == 0) merges.back().first = std::move(v);
      if (pair_count_ == 1) merges.back().second = std::move(v);
      ++pair_count_;
      return true;
    }
    if (mode_ == Mode::Vocab) return bad_id(json(v).dump());
    return scalar(json(std::move(v)));
  }
  bool binary(binary_t&) override { return scalar(json()); }  // not produced by JSON text

  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = fmt::format("{}: not valid JSON: {}", label_, e.what());
    return false;
  }

 private:
  enum class Mode { Dom, Vocab, Merges, MergePair };
  static constexpr size_t kMaxDepth = 128;

  bool fail_at(std::string_view where, std::string_view what) {
    error_ = fmt::format("{}: {}: {}", label_, where, what);
    return false;
  }
  bool bad_id(std::string_view got) {
    return fail_at("model.vocab[" + quote(key_) + "]",
                   fmt::format("expected a token id (an integer), got {}", got.substr(0, 40)));
  }
  bool bad_merge() {
    return fail_at(fmt::format("model.merges[{}]", merges.size() - (mode_ == Mode::MergePair)),
                   "expected \"A B\" or [\"A\", \"B\"]");
  }
  bool vocab_entry(uint64_t v) {
    if (v > uint64_t(kMaxId))
      return fail_at("model.vocab[" + quote(key_) + "]", fmt::format("token id {} is out of range [0, {}]", v, kMaxId));
    const int32_t id = static_cast<int32_t>(v);
    switch (vocab.insert(key_, id)) {
      case Vocab::Insert::Ok: break;
      case Vocab::Insert::DuplicateToken: return fail_at("model.vocab[" + quote(key_) + "]", "the token appears twice");
      case Vocab::Insert::DuplicateId:
        return fail_at("model.vocab",
                       fmt::format("id {} is given to both {} and {}", id, quote(*vocab.token(id)), quote(key_)));
    }
    max_vocab_id = std::max(max_vocab_id, id);
    return true;
  }

  // Adds a value to the open container (or makes it the root).
  json* add(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[key_];
    slot = std::move(v);
    return &slot;
  }
  bool scalar(json&& v) {
    if (mode_ == Mode::Vocab) return bad_id(v.dump());
    if (mode_ == Mode::Merges || mode_ == Mode::MergePair) return bad_merge();
    add(std::move(v));
    return true;
  }
  bool open(json&& container) {
    switch (mode_) {
      case Mode::Vocab: return bad_id(container.is_object() ? "an object" : "an array");
      case Mode::MergePair: return bad_merge();
      case Mode::Merges:
        if (!container.is_array()) return bad_merge();
        merges.emplace_back();
        mode_ = Mode::MergePair;
        pair_count_ = 0;
        return true;
      case Mode::Dom: break;
    }
    if (stack_.size() >= kMaxDepth) return fail_at("JSON", fmt::format("nested more than {} deep", kMaxDepth));
    // root.model.vocab and root.model.merges are captured, leaving an empty
    // placeholder in the DOM (a repeated key starts the capture over).
    const std::string name = stack_.empty() ? "" : stack_.back()->is_object() ? key_ : "[]";
    if (stack_.size() == 2 && path_[1] == "model" && stack_[0]->is_object() && stack_[1]->is_object()) {
      if (name == "vocab" && container.is_object()) {
        vocab = Vocab();
        max_vocab_id = -1;
        add(std::move(container));
        mode_ = Mode::Vocab;
        return true;
      }
      if (name == "merges" && container.is_array()) {
        merges.clear();
        add(std::move(container));
        mode_ = Mode::Merges;
        return true;
      }
    }
    stack_.push_back(add(std::move(container)));
    path_.push_back(name);
    return true;
  }
  bool close() {
    switch (mode_) {
      case Mode::Vocab:
      case Mode::Merges: mode_ = Mode::Dom; return true;
      case Mode::MergePair:
        if (pair_count_ != 2) return bad_merge();
        mode_ = Mode::Merges;
        return true;
      case Mode::Dom: break;
    }
    stack_.pop_back();
    path_.pop_back();
    return true;
  }

  const std::string& label_;
  std::string error_;
  Mode mode_ = Mode::Dom;
  std::vector<json*> stack_;
  std::vector<std::string> path_;  // the key (or "[]") of each open container
  std::string key_;
  int pair_count_ = 0;
};

class Parser {
 public:
  explicit Parser(const std::string& label) : label_(label) {}

  template <typename... Args>
  [[noreturn]] void error(std::string_view where, fmt::format_string<Args...> f, Args&&... args) const {
    fail("{}: {}: {}", label_, where, fmt::format(f, std::forward<Args>(args)...));
  }

  const json* find(const json& obj, const char* key) const {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  const json& need(const json& obj, const char* key, const std::string& where) const {
    const json* v = find(obj, key);
    if (!v) error(where, "missing \"{}\"", key);
    return *v;
  }
  void need_object(const json& v, const std::string& where) const {
    if (!v.is_object()) error(where, "expected an object, got {}", v.type_name());
  }
  std::string need_string(const json& obj, const char* key, const std::string& where) const {
    const json& v = need(obj, key, where);
    if (!v.is_string()) error(where + "." + key, "expected a string, got {}", v.type_name());
    return v.get<std::string>();
  }
  bool need_bool(const json& obj, const char* key, const std::string& where) const {
    const json& v = need(obj, key, where);
    if (!v.is_boolean()) error(where + "." + key, "expected true or false, got {}", v.type_name());
    return v.get<bool>();
  }
  bool opt_bool(const json& obj, const char* key, const std::string& where, bool dflt) const {
    const json* v = find(obj, key);
    if (!v || v->is_null()) return dflt;
    if (!v->is_boolean()) error(where + "." + key, "expected true or false, got {}", v->type_name());
    return v->get<bool>();
  }
  int32_t need_id(const json& v, const std::string& where) const {
    if (!v.is_number_integer()) error(where, "expected a token id (an integer), got {}", v.dump().substr(0, 40));
    const bool neg = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
    if (neg || (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(kMaxId) : v.get<int64_t>() > kMaxId))
      error(where, "token id {} is out of range [0, {}]", v.dump(), kMaxId);
    return static_cast<int32_t>(v.get<int64_t>());
  }

  void normalizer(const json& j, const std::string& where, int depth, std::vector<NormForm>& out) const {
    if (j.is_null()) return;
    need_object(j, where);
    if (depth > kMaxNesting) error(where, "Sequence nested more than {} deep", kMaxNesting);
    const std::string type = need_string(j, "type", where);
    if (type == "NFC")
      out.push_back(NormForm::NFC);
    else if (type == "NFD")
      out.push_back(NormForm::NFD);
    else if (type == "NFKC")
      out.push_back(NormForm::NFKC);
    else if (type == "NFKD")
      out.push_back(NormForm::NFKD);
    else if (type == "Sequence") {
      const json& list = need(j, "normalizers", where);
      if (!list.is_array()) error(where + ".normalizers", "expected an array, got {}", list.type_name());
      for (size_t i = 0; i < list.size(); ++i)
        normalizer(list[i], fmt::format("{}.normalizers[{}]", where, i), depth + 1, out);
    } else {
      error(where + ".type", "unsupported normalizer {} (supported: NFC, NFD, NFKC, NFKD, Sequence)", quote(type));
    }
  }

  // Flattens Sequence pre-tokenizers into (node, path) pairs.
  void flatten_pre(const json& j, const std::string& where, int depth,
                   std::vector<std::pair<const json*, std::string>>& out) const {
    need_object(j, where);
    if (depth > kMaxNesting) error(where, "Sequence nested more than {} deep", kMaxNesting);
    if (need_string(j, "type", where) == "Sequence") {
      const json& list = need(j, "pretokenizers", where);
      if (!list.is_array()) error(where + ".pretokenizers", "expected an array, got {}", list.type_name());
      for (size_t i = 0; i < list.size(); ++i)
        flatten_pre(list[i], fmt::format("{}.pretokenizers[{}]", where, i), depth + 1, out);
    } else {
      out.emplace_back(&j, where);
    }
  }

  void pre_tokenizer(const json* j, std::vector<PreStep>& steps) const {
    static const char* kNeedByteLevel =
        "a byte-level BPE tokenizer needs a ByteLevel pre-tokenizer (alone, or last in a Sequence)";
    if (!j || j->is_null()) error("pre_tokenizer", "missing; {}", kNeedByteLevel);
    std::vector<std::pair<const json*, std::string>> nodes;
    flatten_pre(*j, "pre_tokenizer", 0, nodes);
    bool byte_level = false;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const json& n = *nodes[i].first;
      const std::string& where = nodes[i].second;
      const std::string type = need_string(n, "type", where);
      if (byte_level) error(where, "{} after ByteLevel is not supported; {}", type, kNeedByteLevel);
      if (type == "Split") {
        PreStep step;
        const json& pat = need(n, "pattern", where);
        need_object(pat, where + ".pattern");
        const json* re = find(pat, "Regex");
        const json* lit = find(pat, "String");
        if (!re == !lit || pat.size() != 1)
          error(where + ".pattern", "expected {{\"Regex\": ...}} or {{\"String\": ...}}");
        const json& p = re ? *re : *lit;
        const std::string pwhere = where + ".pattern." + (re ? "Regex" : "String");
        if (!p.is_string()) error(pwhere, "expected a string, got {}", p.type_name());
        step.regex = Regex::compile(p.get<std::string>(), !re, fmt::format("{}: {}", label_, pwhere));
        const std::string b = need_string(n, "behavior", where);
        if (b == "Removed")
          step.behavior = SplitBehavior::Removed;
        else if (b == "Isolated")
          step.behavior = SplitBehavior::Isolated;
        else if (b == "MergedWithPrevious")
          step.behavior = SplitBehavior::MergedWithPrevious;
        else if (b == "MergedWithNext")
          step.behavior = SplitBehavior::MergedWithNext;
        else if (b == "Contiguous")
          step.behavior = SplitBehavior::Contiguous;
        else
          error(where + ".behavior",
                "unknown behavior {} (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)", quote(b));
        step.invert = need_bool(n, "invert", where);
        steps.push_back(std::move(step));
      } else if (type == "ByteLevel") {
        byte_level = true;
        const bool prefix = need_bool(n, "add_prefix_space", where);
        need_bool(n, "trim_offsets", where);  // offsets only; required by `tokenizers`
        if (prefix) steps.push_back(PreStep{PreStep::PrefixSpace, {}, {}, false});
        if (opt_bool(n, "use_regex", where, true)) {
          // GPT-2's pattern, which ByteLevel applies with use_regex.
          static const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
          PreStep step;
          step.regex = Regex::compile(kGpt2, false, "ByteLevel");
          step.behavior = SplitBehavior::Isolated;
          steps.push_back(std::move(step));
        }
      } else {
        error(where + ".type", "unsupported pre-tokenizer {} (supported: Split, ByteLevel, Sequence)", quote(type));
      }
    }
    if (!byte_level) error("pre_tokenizer", "{}", kNeedByteLevel);
  }

  void model(const json& m, Loader& ld, Impl& im) const {
    need_object(m, "model");
    if (const json* t = find(m, "type")) {
      if (!t->is_string()) error("model.type", "expected a string, got {}", t->type_name());
      if (t->get<std::string>() != "BPE")
        error("model.type", "unsupported model {} (only BPE is supported)", quote(t->get<std::string>()));
    }
    Bpe& bpe = im.bpe;
    const json& vocab = need(m, "vocab", "model");
    if (!vocab.is_object()) error("model.vocab", "expected an object (token -> id), got {}", vocab.type_name());
    bpe.vocab = std::move(ld.vocab);
    im.vocab_size = ld.max_vocab_id + 1;
    for (int b = 0; b < 256; ++b) bpe.byte_id[b] = bpe.vocab.find(byte_char(static_cast<uint8_t>(b)));

    const json& merges = need(m, "merges", "model");
    if (!merges.is_array()) error("model.merges", "expected an array, got {}", merges.type_name());
    bpe.merges.reserve(ld.merges.size());
    bpe.merge_map.reserve(ld.merges.size());
    std::string joined;
    for (size_t i = 0; i < ld.merges.size(); ++i) {
      const auto& [a, b] = ld.merges[i];
      const auto where = [&] { return fmt::format("model.merges[{}]", i); };
      const int32_t ia = bpe.vocab.find(a), ib = bpe.vocab.find(b);
      if (ia < 0) error(where(), "{} is not in the vocab", quote(a));
      if (ib < 0) error(where(), "{} is not in the vocab", quote(b));
      joined.assign(a).append(b);
      const int32_t inew = bpe.vocab.find(joined);
      if (inew < 0) error(where(), "the merged token {} is not in the vocab", quote(joined));
      bpe.merges.emplace_back(ia, ib);
      // A repeated merge takes its last rank, as in `tokenizers`.
      bpe.merge_map.set(MergeMap::key(ia, ib), {uint32_t(i), inew});
    }

    if (const json* d = find(m, "dropout"); d && !d->is_null()) {
      if (!d->is_number()) error("model.dropout", "expected a number or null, got {}", d->type_name());
      if (d->get<double>() != 0)
        error("model.dropout", "BPE dropout {} is not supported (encodings would be random)", d->dump());
      im.dropout = 0.0;
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json* v = find(m, key);
      if (!v || v->is_null()) continue;
      if (!v->is_string()) error(fmt::format("model.{}", key), "expected a string or null, got {}", v->type_name());
      if (!v->get<std::string>().empty())
        error(fmt::format("model.{}", key), "{} is not supported (byte-level BPE uses none)",
              quote(v->get<std::string>()));
      (key[0] == 'c' ? im.continuing_subword_prefix : im.end_of_word_suffix) = "";
    }
    if (const json* u = find(m, "unk_token"); u && !u->is_null()) {
      if (!u->is_string()) error("model.unk_token", "expected a string or null, got {}", u->type_name());
      const int32_t id = bpe.vocab.find(u->get<std::string>());
      if (id < 0) error("model.unk_token", "{} is not in the vocab", quote(u->get<std::string>()));
      bpe.unk_token = u->get<std::string>();
      bpe.unk_id = id;
    }
    bpe.fuse_unk = opt_bool(m, "fuse_unk", "model", false);
    bpe.byte_fallback = opt_bool(m, "byte_fallback", "model", false);
    bpe.ignore_merges = opt_bool(m, "ignore_merges", "model", false);
  }

  void added_tokens(const json* list, Impl& im) const {
    if (!list || list->is_null()) return;
    if (!list->is_array()) error("added_tokens", "expected an array, got {}", list->type_name());
    const int32_t model_size = static_cast<int32_t>(im.bpe.vocab.size());
    int32_t max_added = -1;
    for (size_t i = 0; i < list->size(); ++i) {
      const json& e = (*list)[i];
      const std::string where = fmt::format("added_tokens[{}]", i);
      need_object(e, where);
      AddedToken t;
      t.id = need_id(need(e, "id", where), where + ".id");
      t.content = need_string(e, "content", where);
      if (t.content.empty()) error(where + ".content", "empty");
      t.single_word = need_bool(e, "single_word", where);
      t.lstrip = need_bool(e, "lstrip", where);
      t.rstrip = need_bool(e, "rstrip", where);
      t.normalized = need_bool(e, "normalized", where);
      t.special = need_bool(e, "special", where);
      if (im.added_by_content.count(t.content)) error(where, "{} appears twice", quote(t.content));
      // `tokenizers` ignores the id in the file: a token of the vocab keeps its
      // vocab id, any other takes the next id after the vocab and the added
      // tokens before it. Files where that differs would mean other ids there.
      const int32_t in_vocab = im.bpe.vocab.find(t.content);
      int32_t expect;
      if (in_vocab >= 0)
        expect = in_vocab;
      else if (max_added < 0)
        expect = model_size;
      else
        expect = (max_added >= model_size || model_size == 0) ? max_added + 1 : model_size;
      if (t.id != expect)
        error(where,
              "{} has id {}, but Hugging Face tokenizers would give it id {} (added tokens keep their vocab id, "
              "or follow the vocab and the added tokens before them)",
              quote(t.content), t.id, expect);
      if (in_vocab < 0) {
        if (const auto clash = im.bpe.vocab.token(t.id))
          error(where, "{} has id {}, which the vocab gives to {}", quote(t.content), t.id, quote(*clash));
        im.added_by_id.emplace(t.id, im.added.size());
      }
      max_added = std::max(max_added, t.id);
      im.vocab_size = std::max(im.vocab_size, t.id + 1);
      im.added_by_content.emplace(t.content, im.added.size());
      im.added.push_back(std::move(t));
    }
  }

 private:
  const std::string& label_;
};

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::shared_ptr<Impl> parse_tokenizer_json(std::string_view text, const std::string& label) {
  Loader ld(label);
  if (!json::sax_parse(text.begin(), text.end(), &ld)) fail("{}", ld.error());
  const json& root = ld.root;
  Parser p(label);
  if (!root.is_object()) fail("{}: expected a JSON object (a tokenizer.json), got {}", label, root.type_name());
  auto im = std::make_shared<Impl>();
  im->label = label;

  const json* model = p.find(root, "model");
  if (!model) fail("{}: missing \"model\"", label);
  p.model(*model, ld, *im);
  p.added_tokens(p.find(root, "added_tokens"), *im);

  if (const json* n = p.find(root, "normalizer")) {
    p.normalizer(*n, "normalizer", 0, im->normalizer);
    im->normalizer_json = *n;
  }
  const json* pre = p.find(root, "pre_tokenizer");
  p.pre_tokenizer(pre, im->pre_steps);
  im->pre_tokenizer_json = *pre;

  const json* dec = p.find(root, "decoder");
  if (!dec || dec->is_null())
    fail("{}: decoder: missing; a byte-level BPE tokenizer needs the ByteLevel decoder", label);
  p.need_object(*dec, "decoder");
  if (const std::string t = p.need_string(*dec, "type", "decoder"); t != "ByteLevel")
    p.error("decoder.type", "unsupported decoder {} (only ByteLevel is supported)", quote(t));
  im->decoder_json = *dec;

  for (auto [key, dst] : {std::pair{"version", &im->version}, std::pair{"truncation", &im->truncation},
                          std::pair{"padding", &im->padding}, std::pair{"post_processor", &im->post_processor}})
    if (const json* v = p.find(root, key)) *dst = *v;

  // Added tokens are found in the raw text, or (normalized = true) in the
  // normalized text, where their normalized content is what is looked for.
  std::vector<std::pair<std::string, size_t>> raw, norm;
  // They decode to what they match, as in `tokenizers`.
  for (size_t i = 0; i < im->added.size(); ++i) {
    AddedToken& t = im->added[i];
    t.text = t.normalized ? normalize(t.content, im->normalizer) : t.content;
    (t.normalized ? norm : raw).emplace_back(t.text, i);
  }
  im->raw_matcher.build(std::move(raw));
  im->normalized_matcher.build(std::move(norm));
  return im;
}

std::string write_tokenizer_json(const Impl& im) {
  std::string out;
  out.reserve(32 * (im.bpe.vocab.size() + im.bpe.merges.size()) + 4096);
  const auto q = [](const std::string& s) { return dump(json(s)); };
  out += "{\n";
  out += "  \"version\": " + dump(im.version) + ",\n";
  out += "  \"truncation\": " + dump(im.truncation) + ",\n";
  out += "  \"padding\": " + dump(im.padding) + ",\n";
  out += "  \"added_tokens\": [";
  for (size_t i = 0; i < im.added.size(); ++i) {
    const AddedToken& t = im.added[i];
    out += i ? ",\n    " : "\n    ";
    out += fmt::format(
        "{{\"id\": {}, \"content\": {}, \"single_word\": {}, \"lstrip\": {}, \"rstrip\": {}, \"normalized\": {}, "
        "\"special\": {}}}",
        t.id, q(t.content), t.single_word, t.lstrip, t.rstrip, t.normalized, t.special);
  }
  out += im.added.empty() ? "],\n" : "\n  ],\n";
  out += "  \"normalizer\": " + dump(im.normalizer_json) + ",\n";
  out += "  \"pre_tokenizer\": " + dump(im.pre_tokenizer_json) + ",\n";
  out += "  \"post_processor\": " + dump(im.post_processor) + ",\n";
  out += "  \"decoder\": " + dump(im.decoder_json) + ",\n";
  const Bpe& bpe = im.bpe;
  const auto opt = [&](const std::optional<std::string>& s) { return s ? q(*s) : std::string("null"); };
  out += "  \"model\": {\n    \"type\": \"BPE\",\n";
  out += fmt::format("    \"dropout\": {},\n", im.dropout ? "0.0" : "null");
  out += "    \"unk_token\": " + opt(bpe.unk_token) + ",\n";
  out += "    \"continuing_subword_prefix\": " + opt(im.continuing_subword_prefix) + ",\n";
  out += "    \"end_of_word_suffix\": " + opt(im.end_of_word_suffix) + ",\n";
  out += fmt::format("    \"fuse_unk\": {},\n    \"byte_fallback\": {},\n    \"ignore_merges\": {},\n", bpe.fuse_unk,
                     bpe.byte_fallback, bpe.ignore_merges);
  // The vocab in id order, as `tokenizers` writes it.
  const auto by_id = bpe.vocab.by_id();
  out += "    \"vocab\": {";
  for (size_t i = 0; i < by_id.size(); ++i) {
    out += i ? ",\n      " : "\n      ";
    out += q(std::string(by_id[i].second));
    out += ": ";
    out += std::to_string(by_id[i].first);
  }
  out += by_id.empty() ? "},\n" : "\n    },\n";
  out += "    \"merges\": [";
  for (size_t i = 0; i < bpe.merges.size(); ++i) {
    out += i ? ",\n      [" : "\n      [";
    out += q(std::string(*bpe.vocab.token(bpe.merges[i].first)));
    out += ", ";
    out += q(std::string(*bpe.vocab.token(bpe.merges[i].second)));
    out += "]";
  }
  out += bpe.merges.empty() ? "]\n" : "\n    ]\n";
  out += "  }\n}\n";
  return out;
}

}  // namespace mxrl::detail
