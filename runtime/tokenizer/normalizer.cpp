#include "runtime/tokenizer/normalizer.hpp"

#include "runtime/error.hpp"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

namespace troupe::tokenizer_detail {

using tokenizer_json::json;
using tokenizer_json::Where;

namespace {

void add_component(const json& value, const Where& where, std::vector<int>& forms) {
  const std::string type = tokenizer_json::type_of(value, where);
  if (type == "NFC") {
    forms.push_back(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  } else if (type == "NFD") {
    forms.push_back(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  } else if (type == "NFKC") {
    forms.push_back(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  } else if (type == "NFKD") {
    forms.push_back(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  } else if (type == "Sequence") {
    const json* list = tokenizer_json::member(value, "normalizers");
    if (list == nullptr || !list->is_array()) (where / "normalizers").fail("expected a list");
    for (std::size_t i = 0; i < list->size(); ++i) {
      add_component((*list)[i], (where / "normalizers")[i], forms);
    }
  } else {
    (where / "type")
        .fail(fmt::format("unsupported normalizer type \"{}\" (supported: NFC, NFD, NFKC, NFKD, "
                          "Sequence)",
                          type));
  }
}

}  // namespace

Normalizer Normalizer::from_json(const json& value, const Where& where) {
  Normalizer n;
  if (!value.is_null()) add_component(value, where, n.forms_);
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string out(text);
  if (forms_.empty()) return out;
  // Every normal form leaves ASCII as it is.
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return out;
  for (int options : forms_) {
    utf8proc_uint8_t* result = nullptr;
    // An explicit length (no UTF8PROC_NULLTERM) keeps embedded NUL characters.
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(out.data()),
                                            static_cast<utf8proc_ssize_t>(out.size()), &result,
                                            static_cast<utf8proc_option_t>(options));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
    if (n < 0) {
      fail("tokenizer normalizer: utf8proc could not normalize the text ({})", utf8proc_errmsg(n));
    }
    out.assign(reinterpret_cast<const char*>(result), static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace troupe::tokenizer_detail
