// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}) over ByteLevel symbols, merging as HF
// tokenizers does: the pair with the lowest merge rank first, the leftmost among equal ranks, with a
// cache of encoded words.
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
  // and merges in file order; throws gsurg::Error(what) without the file name (the caller adds it).
  void load(const nlohmann::json& model, const std::vector<std::pair<std::string, long long>>& vocab,
            const std::vector<std::pair<std::string, std::string>>& merges, const ByteLevel& byte_level);

  // Appends the ids of one pre-tokenized word given as raw bytes.
  void encode_word(std::string_view word, std::vector<int>& out) const;

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

  const ByteLevel* byte_level_ = nullptr;
  std::unordered_map<std::string, int> vocab_;
  std::vector<const std::string*> vocab_r_;  // id -> the key in vocab_ (nullptr for unused ids)
  std::unordered_map<uint64_t, Merge> merges_;
  int byte_id_[256];      // id of each byte's ByteLevel symbol, -1 when not in the vocabulary
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
