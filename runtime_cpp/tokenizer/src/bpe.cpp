// BPE model (see bpe.hpp). The merge loop mirrors HF's Word::merge_all: a priority queue of candidate
// pairs keyed by (rank, position); a popped entry is dropped when either symbol has been merged away or
// the pair now there would produce a different token.
#include "bpe.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <queue>

#include "gsurg/error.hpp"
#include "utf8.hpp"

namespace gsurg {

namespace {

using nlohmann::json;

// An option that is absent, null, false or "" (Qwen2's files write "" for the subword prefix and suffix,
// which HF treats as no prefix / suffix).
bool is_unset(const json& model, const char* key) {
  auto it = model.find(key);
  return it == model.end() || it->is_null() || (it->is_boolean() && !it->get<bool>()) ||
         (it->is_string() && it->get<std::string>().empty());
}

bool flag(const json& model, const char* key) {
  auto it = model.find(key);
  return it != model.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

void Bpe::load(const json& model, const std::vector<std::pair<std::string, long long>>& vocab,
               const std::vector<std::pair<std::string, std::string>>& merges, const ByteLevel* byte_level) {
  byte_level_ = byte_level;
  if (!model.is_object()) throw Error("\"model\" is not an object");
  if (model.value("type", std::string("BPE")) != "BPE") {
    throw Error("model type \"" + model.value("type", std::string()) + "\" is not supported (only BPE)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!is_unset(model, key)) throw Error(std::string("BPE \"") + key + "\" is not supported");
  }
  byte_fallback_ = flag(model, "byte_fallback");
  if (byte_fallback_ && byte_level) {
    throw Error("model.byte_fallback is set, but the decoder is ByteLevel (byte fallback is supported with the "
                "SentencePiece-style decoders: ByteFallback, Metaspace)");
  }
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null() && it->get<double>() != 0.0) {
    throw Error("BPE dropout is not supported");
  }
  fuse_unk_ = flag(model, "fuse_unk");
  ignore_merges_ = flag(model, "ignore_merges");

  vocab_.reserve(vocab.size());
  for (const auto& entry : vocab) {
    if (entry.second < 0 || entry.second > 0x7FFFFFF) {  // ids index a table; 134M is far beyond any vocabulary
      throw Error("BPE vocabulary id " + std::to_string(entry.second) + " is out of range");
    }
    vocab_[entry.first] = static_cast<int>(entry.second);
  }
  // id -> token; when several tokens share an id the last one in the file wins (HF's map is unordered)
  for (const auto& kv : vocab_) max_id_ = std::max(max_id_, kv.second);
  vocab_r_.assign(static_cast<size_t>(max_id_ + 1), nullptr);
  for (const auto& entry : vocab) {
    auto it = vocab_.find(entry.first);
    vocab_r_[static_cast<size_t>(it->second)] = &it->first;
  }

  merges_.reserve(merges.size());
  uint32_t rank = 0;
  std::string joined;
  for (const auto& m : merges) {
    joined.assign(m.first).append(m.second);
    const int ia = token_to_id(m.first), ib = token_to_id(m.second), inew = token_to_id(joined);
    if (ia < 0 || ib < 0 || inew < 0) {
      throw Error("BPE merge " + std::to_string(rank + 1) + " (\"" + m.first + "\", \"" + m.second +
                  "\") uses a token missing from the vocabulary");
    }
    merges_[key(ia, ib)] = Merge{rank, inew};  // a repeated pair keeps its last rank, as HF's map does
    ++rank;
  }

  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const unsigned char byte = static_cast<unsigned char>(b);
    byte_id_[b] = token_to_id(byte_level ? byte_level->symbol(byte) : std::string(name));
    if (byte_fallback_ && byte_id_[b] < 0) {
      throw Error(std::string("model.byte_fallback is true, but model.vocab has no \"") + name +
                  "\" (byte fallback needs all 256 <0xNN> tokens)");
    }
  }
  if (auto it = model.find("unk_token"); it != model.end() && it->is_string()) {
    unk_id_ = token_to_id(it->get<std::string>());
    if (unk_id_ < 0) throw Error("BPE unk_token \"" + it->get<std::string>() + "\" is not in the vocabulary");
  }
}

int Bpe::token_to_id(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* Bpe::id_to_token(int id) const {
  return id >= 0 && static_cast<size_t>(id) < vocab_r_.size() ? vocab_r_[static_cast<size_t>(id)] : nullptr;
}

void Bpe::encode_word(std::string_view word, std::vector<int>& out) const {
  if (word.empty()) return;
  const bool cacheable = word.size() < kCacheMaxWord;
  std::string key_str(word);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key_str);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int> ids;
  // ignore_merges: a word that is itself a token is not split
  const int whole = ignore_merges_ ? token_to_id(byte_level_ ? byte_level_->encode(word) : key_str) : -1;
  if (whole >= 0) {
    ids.push_back(whole);
  } else {
    initial_symbols(word, ids);
    merge_all(ids);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(std::move(key_str), std::move(ids));
  }
}

void Bpe::push_unknown(bool& last_unk, std::vector<int>& ids) const {
  if (unk_id_ >= 0 && !(fuse_unk_ && last_unk)) ids.push_back(unk_id_);
  last_unk = unk_id_ >= 0;
}

// One symbol per byte (ByteLevel) or per character (with byte fallback); a symbol not in the vocabulary
// becomes the unk token (consecutive ones fused when fuse_unk) or, without an unk token, is dropped, as in
// HF. (HF holds a pending unk back until the next known character, so a byte-fallback character could
// overtake it; byte fallback with all 256 byte tokens, which load() requires, never leaves one unknown.)
void Bpe::initial_symbols(std::string_view word, std::vector<int>& ids) const {
  ids.reserve(word.size());
  bool last_unk = false;
  if (byte_level_) {
    for (char ch : word) {
      const int id = byte_id_[static_cast<unsigned char>(ch)];
      if (id >= 0) {
        ids.push_back(id);
        last_unk = false;
      } else {
        push_unknown(last_unk, ids);
      }
    }
    return;
  }
  std::string ch;
  for (size_t i = 0; i < word.size();) {
    const size_t len = utf8::scan(word, i).length;
    ch.assign(word.data() + i, len);
    const int id = token_to_id(ch);
    if (id >= 0) {
      ids.push_back(id);
      last_unk = false;
    } else if (byte_fallback_) {
      for (char b : ch) ids.push_back(byte_id_[static_cast<unsigned char>(b)]);
      last_unk = false;
    } else {
      push_unknown(last_unk, ids);
    }
    i += len;
  }
}

void Bpe::merge_all(std::vector<int>& ids) const {
  const size_t n = ids.size();
  if (n < 2) return;
  struct Sym {
    int id;
    long prev, next;  // linked list over positions; -1 / n at the ends
    bool alive;
  };
  std::vector<Sym> syms(n);
  for (size_t k = 0; k < n; ++k) {
    syms[k] = Sym{ids[k], static_cast<long>(k) - 1, static_cast<long>(k + 1), true};
  }
  struct Cand {
    uint32_t rank;
    size_t pos;
    int new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
  auto consider = [&](size_t pos, int a, int b) {
    auto it = merges_.find(key(a, b));
    if (it != merges_.end()) queue.push(Cand{it->second.rank, pos, it->second.new_id});
  };
  for (size_t k = 0; k + 1 < n; ++k) consider(k, ids[k], ids[k + 1]);

  while (!queue.empty()) {
    const Cand top = queue.top();
    queue.pop();
    Sym& left = syms[top.pos];
    if (!left.alive || left.next >= static_cast<long>(n)) continue;
    Sym& right = syms[static_cast<size_t>(left.next)];
    auto it = merges_.find(key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next < static_cast<long>(n)) syms[static_cast<size_t>(right.next)].prev = static_cast<long>(top.pos);
    if (left.prev >= 0) consider(static_cast<size_t>(left.prev), syms[static_cast<size_t>(left.prev)].id, left.id);
    if (left.next < static_cast<long>(n)) consider(top.pos, left.id, syms[static_cast<size_t>(left.next)].id);
  }
  ids.clear();
  for (size_t k = 0; k < n; ++k) {
    if (syms[k].alive) ids.push_back(syms[k].id);
  }
}

}  // namespace gsurg
