// Tokenizer and StreamDecoder (see gsurg/tokenizer.hpp): the encode pipeline of HF's TokenizerImpl - added
// tokens on the raw text, the normalizer per remaining piece, added tokens on the normalized text, the
// pre-tokenizer (Qwen2's split, or the SentencePiece-style steps), BPE per word - and decoding through the
// ByteLevel decoder or the SentencePiece-style decoder chain.
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
  std::vector<std::string> words;
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
      if (d.sentencepiece) {  // Metaspace's "first": the piece at offset 0 of the input
        words.clear();
        d.spm_pre_tokenizer.split(part, raw.begin == 0 && piece.begin == 0, words);
        for (const std::string& word : words) d.bpe.encode_word(word, ids);
        continue;
      }
      for (const auto& word : qwen2_split(part)) {
        d.bpe.encode_word(part.substr(word.first, word.second - word.first), ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), d.template_suffix.begin(), d.template_suffix.end());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  if (data_->sentencepiece) {
    StreamDecoder stream(*this);
    std::string text;
    for (int id : ids) text += stream.push(id);
    return text + stream.finish();
  }
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
  const detail::TokenizerData& d = *tok_.data_;
  if (d.sentencepiece) {
    if (id < 0 || static_cast<size_t>(id) >= d.known.size() || !d.known[static_cast<size_t>(id)]) return "";
    return d.spm_decoder.push(d.token_text[static_cast<size_t>(id)], state_);
  }
  std::string& pending = state_.pending;
  pending += tok_.token_bytes(id);
  const size_t done = utf8::complete_prefix(pending);
  std::string text = utf8::repair(std::string_view(pending).substr(0, done));
  pending.erase(0, done);
  return text;
}

std::string StreamDecoder::finish() {
  if (tok_.data_->sentencepiece) return tok_.data_->spm_decoder.finish(state_);
  std::string text = utf8::repair(state_.pending);
  state_ = detail::StreamState();
  return text;
}

}  // namespace gsurg
