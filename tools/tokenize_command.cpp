// troupe tokenize: the ids of each text as a JSON array per line (or, with --decode, the
// text of each JSON array of ids), for debugging tokenizers.
#include <nlohmann/json.hpp>

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
  app.add_flag("--decode", o->decode, "inputs are JSON arrays of ids: print their text");
  app.add_flag("--no-special-tokens", o->no_special,
               "encode without the special tokens the post-processor adds (e.g. BOS)");
  app.add_flag("--keep-special-tokens", o->keep_special, "decode: keep special tokens");
  app.add_option("inputs", o->inputs, "texts (or JSON id arrays with --decode)")->required();
  return [o] {
    const auto tok = Tokenizer::load(o->tokenizer.empty() ? default_model_dir() : o->tokenizer);
    for (const auto& in : o->inputs) {
      if (o->decode) {
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(in);
        } catch (const std::exception&) {
          fail("--decode: '{}' is not a JSON array of token ids", in);
        }
        if (!j.is_array()) fail("--decode: '{}' is not a JSON array of token ids", in);
        std::vector<int32_t> ids;
        for (const auto& v : j) {
          if (!v.is_number_integer()) fail("--decode: '{}' holds a non-integer", in);
          ids.push_back(v.get<int32_t>());
        }
        std::cout << nlohmann::json(tok->decode(ids, !o->keep_special))
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                  << "\n";
      } else {
        std::cout << nlohmann::json(tok->encode(in, !o->no_special)).dump() << "\n";
      }
    }
    return 0;
  };
}

}  // namespace troupe::cli
