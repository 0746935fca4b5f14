// What a loaded tokenizer.json holds (shared by the Tokenizer copies, the StreamDecoder and the test
// program): the BPE model, the added tokens, the normalizer, the layout's pre-tokenizer and decoder, and
// each id's token.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "added_tokens.hpp"
#include "bpe.hpp"
#include "byte_level.hpp"
#include "metaspace.hpp"
#include "normalizer.hpp"
#include "spm_decoder.hpp"

namespace gsurg {
namespace detail {

struct TokenizerData {
  // The layout: byte-level BPE (Qwen2's pre-tokenizer, ByteLevel decoder) or SentencePiece-style (characters,
  // byte fallback, Metaspace / Split pre-tokenizers, the SpmDecoder chain).
  bool sentencepiece = false;
  ByteLevel byte_level;
  Bpe bpe;
  AddedVocabulary added;
  std::unordered_map<std::string, int> added_ids;  // content -> id (checked before the vocabulary)
  Normalizer normalizer;
  SpmPreTokenizer spm_pre_tokenizer;  // SentencePiece-style only
  SpmDecoder spm_decoder;             // SentencePiece-style only
  std::vector<int> template_prefix, template_suffix;  // TemplateProcessing's single template around $A
  std::vector<std::string> token_bytes;  // id -> Tokenizer::token_bytes(id)
  std::vector<std::string> token_text;   // id -> the token the decoder sees (SentencePiece-style only)
  std::vector<bool> known;               // id -> some token has this id
  std::string empty;

  // The tokenizer's normalizer applied to valid UTF-8.
  std::string normalize(std::string_view valid) const { return normalizer.apply(valid); }
};

// Reads tokenizer.json into data; throws gsurg::Error("<path>: <reason>").
void load_tokenizer_json(const std::string& path, TokenizerData& data);

}  // namespace detail
}  // namespace gsurg
