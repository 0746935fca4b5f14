// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}), merging as HF tokenizers does: the pair
// with the lowest merge rank first, the leftmost among equal ranks, with a cache of encoded words.
//
// Its initial symbols are either ByteLevel symbols (GPT-2 style: one per byte of the word) or, for
// SentencePiece-style files, the word's characters: a character that is not in the vocabulary becomes its
// UTF-8 bytes as the tokens "<0xNN>" when byte_fallback is set (all 256 must then be in the vocabulary), else
// the unk token (consecutive ones fused with fuse_unk), else nothing.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "byte_level.hpp"

namespace gsurg {

class Bpe {
 public:
  // Builds the model from the "model" object's options (vocab and merges removed) and its vocabulary
  // and merges in file order; byte_level: the ByteLevel symbols, or nullptr for characters (the only mode
  // that accepts byte_fallback). Throws gsurg::Error(what) without the file name (the caller adds it).
  void load(const nlohmann::json& model, const std::vector<std::pair<std::string, long long>>& vocab,
            const std::vector<std::pair<std::string, std::string>>& merges, const ByteLevel* byte_level);

  // Appends the ids of one pre-tokenized word: raw bytes (ByteLevel), or valid UTF-8 (characters).
  void encode_word(std::string_view word, std::vector<int>& out) const;

  // The id of the byte token "<0xNN>" of byte b (byte_fallback), else -1.
  int byte_fallback_id(unsigned char b) const { return byte_fallback_ ? byte_id_[b] : -1; }

  int token_to_id(const std::string& token) const;  // -1 when absent
  const std::string* id_to_token(int id) const;     // nullptr when absent
  size_t vocab_len() const { return vocab_.size(); }  // HF's get_vocab_size: the number of entries
  int max_id() const { return max_id_; }

 private:
  struct Merge {
    uint32_t rank;
    int new_id;
  };
  static uint64_t key(int a, int b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_all(std::vector<int>& ids) const;
  void initial_symbols(std::string_view word, std::vector<int>& ids) const;
  void push_unknown(bool& last_unk, std::vector<int>& ids) const;

  const ByteLevel* byte_level_ = nullptr;
  std::unordered_map<std::string, int> vocab_;
  std::vector<const std::string*> vocab_r_;  // id -> the key in vocab_ (nullptr for unused ids)
  std::unordered_map<uint64_t, Merge> merges_;
  int byte_id_[256];      // id of each byte's ByteLevel symbol or "<0xNN>" token, -1 when not in the vocabulary
  bool byte_fallback_ = false;
  int unk_id_ = -1;       // the unk token's id when the model has one
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int max_id_ = -1;

  static constexpr size_t kCacheCapacity = 10000;
  static constexpr size_t kCacheMaxWord = 256;  // bytes; longer words are not cached
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int>> cache_;
};

}  // namespace gsurg
