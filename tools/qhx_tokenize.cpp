// qhx_tokenize — encode or decode JSON Lines with a tokenizer.json.
//
//   encode: each input line is a JSON string  -> one line: a JSON array of ids
//   decode: each input line is a JSON array of ids -> one line: a JSON string
//
// A bad line stops the run with exit status 1 and an error naming the line;
// every line before it has already been written (and flushed).
#include "cli/cli.hpp"
#include <nlohmann/json.hpp>

#include <iostream>
#include <string>

#include "qhexrt/error.hpp"
#include "qhexrt/tokenizer.hpp"

namespace {

std::string encode_line(const qhx::Tokenizer& tok, const nlohmann::json& j) {
  if (!j.is_string()) qhx::fail("expected a JSON string, got ", j.type_name());
  return nlohmann::json(tok.encode(j.get_ref<const std::string&>())).dump();
}

std::string decode_line(const qhx::Tokenizer& tok, const nlohmann::json& j, bool skip_special) {
  if (!j.is_array()) qhx::fail("expected a JSON array of token ids, got ", j.type_name());
  std::vector<std::int32_t> ids;
  ids.reserve(j.size());
  for (std::size_t k = 0; k < j.size(); ++k) {
    const auto& v = j[k];
    if (!v.is_number_integer()) qhx::fail("element ", k, ": expected an integer token id, got ", v.dump());
    const auto id = v.get<std::int64_t>();
    if (id < 0 || id >= tok.vocab_size())
      qhx::fail("element ", k, ": token id ", id, " out of range [0, ", tok.vocab_size(), ")");
    ids.push_back(static_cast<std::int32_t>(id));
  }
  // Lossy decoding always yields valid UTF-8, so dump() cannot throw here.
  return nlohmann::json(tok.decode(ids, skip_special)).dump();
}

}  // namespace

int main(int argc, char** argv) {
  qhx_cli::App app{"Encode (default) or decode JSON Lines with a Hugging Face tokenizer.json"};
  std::string tokenizer_path;
  bool decode = false;
  bool skip_special = false;
  app.add_option("--tokenizer", tokenizer_path, "path to tokenizer.json")->required();
  app.add_flag("--decode", decode, "input lines are arrays of ids; output decoded strings");
  app.add_flag("--skip-special", skip_special, "with --decode: drop special tokens, as chat output does");
  QHX_CLI_PARSE(app, argc, argv);
  if (skip_special && !decode) {
    std::cerr << "qhx_tokenize: error: --skip-special needs --decode\n";
    return 2;
  }

  std::optional<qhx::Tokenizer> tok;
  try {
    tok.emplace(qhx::Tokenizer::load(tokenizer_path));
  } catch (const std::exception& e) {
    std::cerr << "qhx_tokenize: error: " << e.what() << "\n";
    return 1;
  }

  std::string line;
  std::size_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    try {
      const auto j = nlohmann::json::parse(line);
      std::cout << (decode ? decode_line(*tok, j, skip_special) : encode_line(*tok, j)) << '\n';
    } catch (const std::exception& e) {
      std::cout.flush();
      std::cerr << "qhx_tokenize: error: stdin line " << line_no << ": " << e.what() << "\n";
      return 1;
    }
  }
  std::cout.flush();
  return std::cout ? 0 : 1;
}
