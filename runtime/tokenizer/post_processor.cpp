#include "runtime/tokenizer/post_processor.hpp"

#include "runtime/error.hpp"

namespace troupe::tokenizer_detail {

using tokenizer_json::json;
using tokenizer_json::Where;

namespace {

// A ["token", id] pair of Roberta/BertProcessing.
int32_t pair_id(const json& obj, std::string_view key, const Where& where) {
  const json* v = tokenizer_json::member(obj, key);
  if (v == nullptr || !v->is_array() || v->size() != 2 || !(*v)[1].is_number_integer() ||
      (*v)[1].get<int64_t>() < 0 || (*v)[1].get<int64_t>() > INT32_MAX) {
    (where / key).fail(R"(expected ["token", id])");
  }
  return static_cast<int32_t>((*v)[1].get<int64_t>());
}

}  // namespace

PostProcessor PostProcessor::from_json(const json& value, const Where& where) {
  PostProcessor p;
  if (!value.is_null()) add_component(value, where, p.templates_);
  return p;
}

void PostProcessor::add_component(const json& value, const Where& where,
                                  std::vector<Template>& templates) {
  const std::string type = tokenizer_json::type_of(value, where);
  if (type == "ByteLevel") return;  // only trims offsets
  if (type == "Sequence") {
    const json* list = tokenizer_json::member(value, "processors");
    if (list == nullptr || !list->is_array()) (where / "processors").fail("expected a list");
    for (std::size_t i = 0; i < list->size(); ++i) {
      add_component((*list)[i], (where / "processors")[i], templates);
    }
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const int32_t cls = pair_id(value, "cls", where);
    const int32_t sep = pair_id(value, "sep", where);
    templates.push_back({{false, {cls}}, {true, {}}, {false, {sep}}});
    return;
  }
  if (type != "TemplateProcessing") {
    (where / "type")
        .fail(fmt::format("unsupported post_processor type \"{}\" (supported: "
                          "TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel, "
                          "Sequence)",
                          type));
  }
  const json* single = tokenizer_json::member(value, "single");
  const Where single_where = where / "single";
  if (single == nullptr || !single->is_array()) single_where.fail("expected a list of pieces");
  const json* special = tokenizer_json::member(value, "special_tokens");
  Template t;
  for (std::size_t i = 0; i < single->size(); ++i) {
    const json& piece = (*single)[i];
    const Where w = single_where[i];
    if (const json* seq = tokenizer_json::member(piece, "Sequence")) {
      // "$B" only exists for pairs; a single sequence is "$A".
      if (tokenizer_json::optional_string(*seq, "id", w / "Sequence") != "B") {
        t.push_back({true, {}});
      }
    } else if (const json* tok = tokenizer_json::member(piece, "SpecialToken")) {
      const std::string name = tokenizer_json::string_member(*tok, "id", w / "SpecialToken");
      const json* entry = special == nullptr ? nullptr : tokenizer_json::member(*special, name);
      const json* ids = entry == nullptr ? nullptr : tokenizer_json::member(*entry, "ids");
      if (ids == nullptr || !ids->is_array()) {
        (where / "special_tokens")
            .fail(fmt::format("no entry with \"ids\" for \"{}\" used by single[{}]", name, i));
      }
      Item item{false, {}};
      for (const json& id : *ids) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
          (where / "special_tokens" / name / "ids")
              .fail(fmt::format("expected token ids, got {}", tokenizer_json::brief(id)));
        }
        item.ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
      t.push_back(std::move(item));
    } else {
      w.fail(fmt::format(R"(expected {{"Sequence": ...}} or {{"SpecialToken": ...}}, got {})",
                         tokenizer_json::brief(piece)));
    }
  }
  templates.push_back(std::move(t));
}

void PostProcessor::apply(std::vector<int32_t>& ids) const {
  for (const Template& t : templates_) {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const Item& item : t) {
      if (item.is_sequence) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        out.insert(out.end(), item.ids.begin(), item.ids.end());
      }
    }
    ids.swap(out);
  }
}

bool PostProcessor::adds_leading(int32_t id) const {
  std::vector<int32_t> probe{-1};
  apply(probe);
  return !probe.empty() && probe.front() == id;
}

bool PostProcessor::adds_trailing(int32_t id) const {
  std::vector<int32_t> probe{-1};
  apply(probe);
  return !probe.empty() && probe.back() == id;
}

}  // namespace troupe::tokenizer_detail
