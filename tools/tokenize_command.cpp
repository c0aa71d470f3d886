// troupe tokenize: the ids of each text as a JSON array per line (or, with --decode, the
// text of a sequence of ids as a JSON string), for debugging tokenizers.
#include <nlohmann/json.hpp>

#include <cctype>
#include <climits>
#include <iostream>

#include "actors/engine.hpp"
#include "runtime/error.hpp"
#include "runtime/tokenizer/tokenizer.hpp"
#include "tools/commands.hpp"

namespace troupe::cli {

Runner add_tokenize_command(CLI::App& app) {
  struct Options {
    std::string tokenizer;
    bool decode = false;
    bool no_special = false;
    bool keep_special = false;
    std::vector<std::string> inputs;
  };
  auto o = std::make_shared<Options>();
  app.add_option("--tokenizer", o->tokenizer,
                 "tokenizer directory (or tokenizer.json); default: the embedded model's");
  app.add_flag("--decode", o->decode, "inputs are token ids (\"1 2 3\" or [1,2,3]): print their text");
  app.add_flag("--no-special-tokens", o->no_special,
               "encode without the special tokens the post-processor adds (e.g. BOS)");
  app.add_flag("--keep-special-tokens", o->keep_special, "decode: keep special tokens");
  app.add_option("inputs", o->inputs, "texts (token ids with --decode)")->required();
  return [o] {
    const auto tok = Tokenizer::load(o->tokenizer.empty() ? default_model_dir() : o->tokenizer);
    if (o->decode) {
      // All inputs together are one id sequence: "1 2 3", "1,2,3" or "[1, 2, 3]".
      std::vector<int32_t> ids;
      for (const auto& in : o->inputs) {
        std::string token;
        auto flush = [&] {
          if (token.empty()) return;
          size_t used = 0;
          long long v = 0;
          try {
            v = std::stoll(token, &used);
          } catch (const std::exception&) {
            used = 0;
          }
          if (used != token.size() || v < INT32_MIN || v > INT32_MAX)
            fail("--decode: '{}' is not a token id", token);
          ids.push_back(int32_t(v));
          token.clear();
        };
        for (char ch : in) {
          if (ch == '[' || ch == ']' || ch == ',' || std::isspace(static_cast<unsigned char>(ch)))
            flush();
          else
            token += ch;
        }
        flush();
      }
      std::cout << nlohmann::json(tok->decode(ids, !o->keep_special))
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
      return 0;
    }
    for (const auto& in : o->inputs)
      std::cout << nlohmann::json(tok->encode(in, !o->no_special)).dump() << "\n";
    return 0;
  };
}

}  // namespace troupe::cli
