#include "runtime/tokenizer/tokenizer.hpp"

#include "runtime/error.hpp"
#include "runtime/tokenizer/added_vocabulary.hpp"
#include "runtime/tokenizer/bpe_model.hpp"
#include "runtime/tokenizer/byte_level.hpp"
#include "runtime/tokenizer/json_fields.hpp"
#include "runtime/tokenizer/normalizer.hpp"
#include "runtime/tokenizer/post_processor.hpp"
#include "runtime/tokenizer/pre_tokenizer.hpp"

#include <fstream>
#include <limits>
#include <sstream>

namespace troupe {

using namespace tokenizer_detail;  // the pieces in runtime/tokenizer/*.hpp

using tokenizer_json::json;
using tokenizer_json::Where;
namespace fs = std::filesystem;

struct Tokenizer::Impl {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  AddedVocabulary added;
  PostProcessor post_processor;
  int32_t vocab_size = 0;
  // Per id: the bytes decode emits, and whether a token has the id / is special.
  std::vector<std::string> token_bytes;
  std::vector<uint8_t> flags;
  static constexpr uint8_t kExists = 1, kSpecial = 2;
  // From tokenizer_config.json.
  std::optional<int32_t> bos_id, eos_id;
  bool prepend_bos = false, append_eos = false;
  std::string chat_template;
  int64_t model_max_length = 0;
};

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("Tokenizer::load: cannot open '{}' for reading", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("Tokenizer::load: error while reading '{}'", path.string());
  return ss.str();
}

json parse_json_text(std::string_view text, std::string_view origin) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
    fail("'{}': not valid JSON: {}", origin, e.what());
  }
}

json parse_json(const fs::path& path) {
  return parse_json_text(read_file(path), path.string());
}

// bos_token / eos_token in tokenizer_config.json: "text", {"content": "text", ...} or null.
std::string special_token_string(const json& config, std::string_view key, const Where& where) {
  const json* v = tokenizer_json::member(config, key);
  if (v == nullptr) return {};
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return tokenizer_json::string_member(*v, "content", where / key);
  (where / key)
      .fail(fmt::format("expected a string or {{\"content\": ...}}, got {}",
                        tokenizer_json::brief(*v)));
}

// What tokenizer_config.json (and chat_template.jinja) say.
struct Config {
  std::string bos, eos;  // "" when absent
  bool add_bos = false, add_eos = false;
  std::string chat_template;
  int64_t model_max_length = 0;
};

Config read_config(const fs::path& dir);

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::shared_ptr<const Tokenizer> Tokenizer::load(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    fail(
        "Tokenizer::load: '{}' does not exist (expected a directory holding tokenizer.json, or "
        "a tokenizer.json file)",
        path.string());
  }
  fs::path json_path = path;
  if (fs::is_directory(path, ec)) {
    json_path = path / "tokenizer.json";
    if (!fs::exists(json_path, ec)) {
      const bool sentencepiece = fs::exists(path / "tokenizer.model", ec);
      fail("Tokenizer::load: no tokenizer.json in '{}'{}", path.string(),
           sentencepiece ? " (it has a SentencePiece tokenizer.model, which troupe does not "
                           "read: only Hugging Face tokenizer.json files are supported)"
                         : "");
    }
  }
  const fs::path dir = json_path.parent_path();
  return build(read_file(json_path), json_path.string(), &dir);
}

std::shared_ptr<const Tokenizer> Tokenizer::from_json_text(std::string_view tokenizer_json,
                                                           std::string_view origin) {
  return build(tokenizer_json, origin, nullptr);
}

std::shared_ptr<const Tokenizer> Tokenizer::build(std::string_view tokenizer_json,
                                                  std::string_view origin,
                                                  const fs::path* config_dir) {
  const json root = parse_json_text(tokenizer_json, origin);
  const Where top(std::string(origin), "");
  if (!root.is_object()) top.fail("expected a JSON object at the top level");

  auto impl = std::make_unique<Impl>();
  const auto field = [&](std::string_view key) -> const json& {
    static const json null_value;
    const auto it = root.find(key);
    return it == root.end() ? null_value : *it;
  };

  const json& model = field("model");
  if (model.is_null()) (top / "model").fail("missing");
  impl->model = BpeModel::from_json(model, top / "model");
  impl->normalizer = Normalizer::from_json(field("normalizer"), top / "normalizer");
  impl->pre_tokenizer = PreTokenizer::from_json(field("pre_tokenizer"), top / "pre_tokenizer");
  impl->post_processor = PostProcessor::from_json(field("post_processor"), top / "post_processor");
  impl->added =
      AddedVocabulary::from_json(field("added_tokens"), top / "added_tokens", impl->normalizer);
  const json& decoder = field("decoder");
  if (decoder.is_null()) {
    (top / "decoder")
        .fail("missing (troupe decodes byte-level BPE and needs the \"ByteLevel\" decoder)");
  }
  if (const std::string type = tokenizer_json::type_of(decoder, top / "decoder");
      type != "ByteLevel") {
    (top / "decoder" / "type")
        .fail(fmt::format("unsupported decoder type \"{}\" (supported: ByteLevel)", type));
  }

  // The id tables decode and id_to_token use.
  int32_t max_id = impl->model.max_id();
  for (const AddedToken& t : impl->added.tokens()) max_id = std::max(max_id, t.id);
  impl->vocab_size = max_id + 1;
  impl->token_bytes.assign(static_cast<std::size_t>(impl->vocab_size), std::string());
  impl->flags.assign(static_cast<std::size_t>(impl->vocab_size), 0);
  for (int32_t id = 0; id < impl->vocab_size; ++id) {
    if (const std::string* token = impl->model.id_to_token(id)) {
      impl->token_bytes[id] = byte_level::decode_token(*token);
      impl->flags[id] = Impl::kExists;
    }
  }
  for (const AddedToken& t : impl->added.tokens()) {
    impl->token_bytes[t.id] = byte_level::decode_token(t.content);
    impl->flags[t.id] = Impl::kExists | (t.special ? Impl::kSpecial : 0);
  }
  // Every id the post_processor adds must be a token's, or encode would give ids that decode
  // refuses (HF does not check; found by the tokenizer_json fuzz target).
  std::vector<int32_t> added_ids;
  impl->post_processor.apply(added_ids);
  for (const int32_t id : added_ids) {
    if (id >= impl->vocab_size ||
        (impl->flags[static_cast<std::size_t>(id)] & Impl::kExists) == 0) {
      (top / "post_processor")
          .fail(fmt::format("adds token id {}, which no token of the vocabulary has (ids 0..{})",
                            id, impl->vocab_size - 1));
    }
  }

  const Config config = config_dir ? read_config(*config_dir) : Config{};
  auto lookup = [&](const std::string& token) -> std::optional<int32_t> {
    if (token.empty()) return std::nullopt;
    if (auto id = impl->added.token_to_id(token)) return id;
    return impl->model.token_to_id(token);
  };
  // A bos/eos string that is not in the vocabulary leaves the id unknown rather than failing:
  // transformers would add it as a new token the model was never trained on.
  impl->bos_id = lookup(config.bos);
  impl->eos_id = lookup(config.eos);
  impl->prepend_bos =
      config.add_bos && impl->bos_id && !impl->post_processor.adds_leading(*impl->bos_id);
  impl->append_eos =
      config.add_eos && impl->eos_id && !impl->post_processor.adds_trailing(*impl->eos_id);
  impl->chat_template = config.chat_template;
  impl->model_max_length = config.model_max_length;
  return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(impl)));
}

namespace {

Config read_config(const fs::path& dir) {
  Config impl;
  std::error_code ec;
  const fs::path config_path = dir / "tokenizer_config.json";
  json config = json::object();
  if (fs::exists(config_path, ec)) config = parse_json(config_path);
  const Where where(config_path.string(), "");
  if (!config.is_object()) where.fail("expected a JSON object at the top level");

  impl.bos = special_token_string(config, "bos_token", where);
  impl.eos = special_token_string(config, "eos_token", where);
  impl.add_bos = tokenizer_json::bool_member(config, "add_bos_token", false, where);
  impl.add_eos = tokenizer_json::bool_member(config, "add_eos_token", false, where);

  if (const json* t = tokenizer_json::member(config, "chat_template")) {
    if (t->is_string()) {
      impl.chat_template = t->get<std::string>();
    } else if (t->is_array()) {
      // Several named templates: the one named "default", else the first.
      for (std::size_t i = 0; i < t->size(); ++i) {
        const Where w = (where / "chat_template")[i];
        tokenizer_json::require_object((*t)[i], w);
        const std::string name = tokenizer_json::optional_string((*t)[i], "name", w);
        if (i == 0 || name == "default") {
          impl.chat_template = tokenizer_json::string_member((*t)[i], "template", w);
        }
        if (name == "default") break;
      }
    } else {
      (where / "chat_template")
          .fail(fmt::format("expected a string or a list of {{\"name\", \"template\"}}, got {}",
                            tokenizer_json::brief(*t)));
    }
  } else if (fs::exists(dir / "chat_template.jinja", ec)) {
    // Newer transformers save the template in its own file.
    impl.chat_template = read_file(dir / "chat_template.jinja");
  }

  if (const json* m = tokenizer_json::member(config, "model_max_length")) {
    if (!m->is_number() ||
        (m->is_number_integer() && !m->is_number_unsigned() && m->get<int64_t>() < 0) ||
        (m->is_number_float() && m->get<double>() < 0)) {
      (where / "model_max_length")
          .fail(fmt::format("expected a non-negative number, got {}", tokenizer_json::brief(*m)));
    }
    // transformers writes int(1e30) for "no limit"; anything beyond int64 means the same.
    if (m->is_number_unsigned()) {
      const auto v = m->get<uint64_t>();
      impl.model_max_length = v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                                  ? static_cast<int64_t>(v)
                                  : 0;
    } else if (m->is_number_integer()) {
      impl.model_max_length = m->get<int64_t>();
    } else {
      const double v = m->get<double>();
      impl.model_max_length = v < 9.2e18 ? static_cast<int64_t>(v) : 0;
    }
    // A limit above 10^18 is a placeholder, not a context length.
    if (impl.model_max_length > int64_t{1000000000000000000}) impl.model_max_length = 0;
  }
  return impl;
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const std::size_t bad = utf8::find_invalid(text); bad != std::string_view::npos) {
    fail("Tokenizer::encode: text is not valid UTF-8 (byte 0x{:02X} at offset {})",
         static_cast<unsigned char>(text[bad]), bad);
  }
  const Impl& m = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<AddedVocabulary::Span> raw_spans, spans;
  std::vector<std::string> words;

  m.added.split(text, /*normalized=*/false, raw_spans);
  for (const auto& raw : raw_spans) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    const std::string normalized = m.normalizer.apply(text.substr(raw.begin, raw.end - raw.begin));
    spans.clear();
    m.added.split(normalized, /*normalized=*/true, spans);
    for (const auto& span : spans) {
      if (span.id >= 0) {
        ids.push_back(span.id);
        continue;
      }
      words.clear();
      m.pre_tokenizer.split(std::string_view(normalized).substr(span.begin, span.end - span.begin),
                            words);
      for (const std::string& word : words) m.model.tokenize(word, ids);
    }
  }
  if (add_special_tokens) {
    m.post_processor.apply(ids);
    if (m.prepend_bos) ids.insert(ids.begin(), *m.bos_id);
    if (m.append_eos) ids.push_back(*m.eos_id);
  }
  return ids;
}

void Tokenizer::append_bytes(std::span<const int32_t> ids, bool skip_special_tokens,
                             std::string_view who, std::string* out) const {
  const Impl& m = *impl_;
  for (const int32_t id : ids) {
    if (id < 0 || id >= m.vocab_size) {
      fail("{}: token id {} is out of range (vocab size {}: ids 0..{})", who, id, m.vocab_size,
           m.vocab_size - 1);
    }
  }
  if (out == nullptr) return;
  for (const int32_t id : ids) {
    const uint8_t f = m.flags[static_cast<std::size_t>(id)];
    if (skip_special_tokens && (f & Impl::kSpecial) != 0) continue;
    out->append(m.token_bytes[static_cast<std::size_t>(id)]);
  }
}

const std::string* Tokenizer::added_content(int32_t id) const {
  const AddedToken* t = impl_->added.find(id);
  return t ? &t->content : nullptr;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  append_bytes(ids, skip_special_tokens, "Tokenizer::decode", &bytes);
  return utf8::decode_lossy(bytes);
}

int32_t Tokenizer::vocab_size() const {
  return impl_->vocab_size;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.token_to_id(token)) return id;
  return impl_->model.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= impl_->vocab_size) {
    fail("Tokenizer::id_to_token: token id {} is out of range (vocab size {}: ids 0..{})", id,
         impl_->vocab_size, impl_->vocab_size - 1);
  }
  if (const AddedToken* t = impl_->added.find(id)) return t->content;
  if (const std::string* t = impl_->model.id_to_token(id)) return *t;
  return {};
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < impl_->vocab_size &&
         (impl_->flags[static_cast<std::size_t>(id)] & Impl::kSpecial) != 0;
}

std::optional<int32_t> Tokenizer::bos_token_id() const {
  return impl_->bos_id;
}
std::optional<int32_t> Tokenizer::eos_token_id() const {
  return impl_->eos_id;
}
const std::string& Tokenizer::chat_template() const {
  return impl_->chat_template;
}
int64_t Tokenizer::model_max_length() const {
  return impl_->model_max_length;
}

}  // namespace troupe
