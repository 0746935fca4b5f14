// What a loaded tokenizer.json holds (shared by the Tokenizer copies, the StreamDecoder and the test
// program): the BPE model, the added tokens, whether text is NFC-normalized, and each id's decoded bytes.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "added_tokens.hpp"
#include "bpe.hpp"
#include "byte_level.hpp"

namespace gsurg {
namespace detail {

struct TokenizerData {
  ByteLevel byte_level;
  Bpe bpe;
  AddedVocabulary added;
  std::unordered_map<std::string, int> added_ids;  // content -> id (checked before the vocabulary)
  bool nfc = false;                                // the normalizer is NFC (else none)
  std::vector<int> template_prefix, template_suffix;  // TemplateProcessing's single template around $A
  std::vector<std::string> token_bytes;            // id -> the bytes decode() emits for it
  std::vector<bool> known;                         // id -> some token has this id
  std::string empty;

  // The tokenizer's normalizer applied to valid UTF-8: its NFC form when the normalizer is NFC, else a copy.
  std::string normalize(std::string_view valid) const;
};

// Reads tokenizer.json into data; throws gsurg::Error("<path>: <reason>").
void load_tokenizer_json(const std::string& path, TokenizerData& data);

}  // namespace detail
}  // namespace gsurg
