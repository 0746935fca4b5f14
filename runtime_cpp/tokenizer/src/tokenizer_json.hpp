// Fast reading of tokenizer.json: a SAX pass that streams "model"."vocab" and "model"."merges" (150k
// entries each in a large model's file) straight into vectors and builds an ordinary nlohmann::json document of
// everything else. Building the whole file as a DOM costs seconds (a std::map node per vocabulary entry);
// this keeps loading a 150k-entry tokenizer well under a second.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace gsurg {

struct TokenizerJson {
  nlohmann::json rest;  // the document without model.vocab and model.merges
  bool has_vocab = false, has_merges = false;
  std::vector<std::pair<std::string, long long>> vocab;          // in file order
  std::vector<std::pair<std::string, std::string>> merges;        // in file order, "#version" lines dropped
};

// Parses text; throws gsurg::Error(reason) on invalid JSON or a malformed vocab / merges entry (a legacy
// merge must be "a b" with exactly one space, as HF requires).
TokenizerJson parse_tokenizer_json(const std::string& text);

}  // namespace gsurg
