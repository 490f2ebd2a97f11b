// A text-only run plan on a checkpoint directory, with the lm-head graph the test chooses: the
// doctor's and the qnn-htp tests' plans differ only in that entry.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "test_support.hpp"

namespace qhx::test {

inline nlohmann::json text_plan(const std::filesystem::path& ck, const nlohmann::json& lm_head) {
  const std::string weights = (ck / "model.safetensors").string();
  return {{"qhexrt_manifest", 1},
          {"model", "qwen3vl"},
          {"config", (ck / "config.json").string()},
          {"tokenizer", tokenizer_json_path().string()},
          {"chat_template", "qwen3vl"},
          {"context_length", 256},
          {"prefill_chunk", 64},
          {"tables", {{"embed", {{"file", weights}, {"tensor", "model.language_model.embed_tokens.weight"}}}}},
          {"graphs",
           {{"llm",
             {{"backend", "cpu"},
              {"kind", "qwen3vl.text_decoder"},
              {"config", (ck / "config.json").string()},
              {"weights", weights}}},
            {"lm_head", lm_head}}},
          {"stages",
           {{{"op", "tokenize"}},
            {{"op", "embed"}, {"table", "embed"}},
            {{"op", "prefill"}, {"graph", "llm"}, {"lm_head", "lm_head"}},
            {{"op", "decode"}, {"graph", "llm"}, {"lm_head", "lm_head"}, {"table", "embed"}},
            {{"op", "detokenize"}}}}};
}

}  // namespace qhx::test
