// Tokenizer and StreamDecoder (see gsurg/tokenizer.hpp): the encode pipeline of HF's TokenizerImpl for
// this tokenizer family - added tokens on the raw text, NFC per remaining piece, added tokens on the
// normalized text, Qwen2 split, ByteLevel + BPE per word - and decoding through the ByteLevel decoder.
#include "gsurg/tokenizer.hpp"

#include "pretokenize.hpp"
#include "tokenizer_data.hpp"
#include "utf8.hpp"

namespace gsurg {

Tokenizer Tokenizer::load(const std::string& tokenizer_json_path) {
  auto data = std::make_shared<detail::TokenizerData>();
  detail::load_tokenizer_json(tokenizer_json_path, *data);
  return Tokenizer(std::move(data));
}

std::vector<int> Tokenizer::encode(const std::string& text, bool add_special_tokens) const {
  const detail::TokenizerData& d = *data_;
  const bool valid_input = utf8::is_valid(text);
  const std::string repaired = valid_input ? std::string() : utf8::repair(text);  // as Python's "replace"
  const std::string_view valid = valid_input ? std::string_view(text) : std::string_view(repaired);

  std::vector<int> ids;
  ids.reserve(valid.size() / 3 + 8);
  if (add_special_tokens) ids.insert(ids.end(), d.template_prefix.begin(), d.template_prefix.end());
  for (const Piece& raw : d.added.split(valid, false)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    const std::string normalized = d.normalize(valid.substr(raw.begin, raw.end - raw.begin));
    const std::string_view norm(normalized);
    for (const Piece& piece : d.added.split(norm, true)) {
      if (piece.id >= 0) {
        ids.push_back(piece.id);
        continue;
      }
      const std::string_view part = norm.substr(piece.begin, piece.end - piece.begin);
      for (const auto& word : qwen2_split(part)) {
        d.bpe.encode_word(part.substr(word.first, word.second - word.first), ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), d.template_suffix.begin(), d.template_suffix.end());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string bytes;
  for (int id : ids) bytes += token_bytes(id);
  return utf8::repair(bytes);
}

int Tokenizer::token_id(const std::string& token) const {
  auto it = data_->added_ids.find(token);
  if (it != data_->added_ids.end()) return it->second;
  return data_->bpe.token_to_id(token);
}

int Tokenizer::vocab_size() const { return static_cast<int>(data_->token_bytes.size()); }

const std::string& Tokenizer::token_bytes(int id) const {
  const detail::TokenizerData& d = *data_;
  if (id < 0 || static_cast<size_t>(id) >= d.token_bytes.size() || !d.known[static_cast<size_t>(id)]) {
    return d.empty;
  }
  return d.token_bytes[static_cast<size_t>(id)];
}

StreamDecoder::StreamDecoder(const Tokenizer& tok) : tok_(tok) {}

std::string StreamDecoder::push(int id) {
  pending_ += tok_.token_bytes(id);
  const size_t done = utf8::complete_prefix(pending_);
  std::string text = utf8::repair(std::string_view(pending_).substr(0, done));
  pending_.erase(0, done);
  return text;
}

std::string StreamDecoder::finish() {
  std::string text = utf8::repair(pending_);
  pending_.clear();
  return text;
}

}  // namespace gsurg
