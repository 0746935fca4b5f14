// gsurg::Tokenizer: the byte-level BPE of a Hugging Face `tokenizer.json` (the Qwen2 pre-tokenizer's layout), giving the
// same ids as HF `tokenizers` `Tokenizer.encode(text).ids` and the same text as
// `Tokenizer.decode(ids, skip_special_tokens=False)`.
//
// Contract:
//   - load() accepts a BPE model (vocab + merges as "a b" strings or ["a", "b"] pairs), an optional NFC
//     normalizer, the Qwen2 pre-tokenizer (Split on Qwen2's regex, then ByteLevel without regex), a
//     ByteLevel or absent post-processor, or a TemplateProcessing (alone or in a Sequence with ByteLevel),
//     and the ByteLevel decoder; anything else throws gsurg::Error naming the file and the unsupported part.
//     A TemplateProcessing's "single" template (special tokens around $A, as transformers 5 writes one,
//     the identity "$A" when no BOS/EOS is added) is applied when add_special_tokens is true, as HF's
//     encode(text, add_special_tokens) does; its "pair" template is unused (one sequence at a time). Added tokens get their ids as HF assigns them (the model's id when
//     the content is in the vocabulary, else the next free id in file order). "truncation" and "padding"
//     are ignored (the files it reads set neither; transformers overrides them on every call).
//   - encode(): added tokens are matched first (leftmost-longest; non-normalized ones on the raw text,
//     normalized ones on the NFC text), then each remaining piece is NFC-normalized, split by the Qwen2
//     regex and BPE-encoded. Input that is not valid UTF-8 is first repaired like Python's
//     `bytes.decode("utf-8", "replace")` (each maximal invalid subpart becomes U+FFFD), so the ids equal
//     HF's for that repaired string.
//   - decode(): the bytes of the tokens (ByteLevel-mapped, or an added token's raw text), with invalid
//     UTF-8 replaced by U+FFFD as Rust's String::from_utf8_lossy does; unknown ids are skipped.
//   - Thread safety: a loaded Tokenizer is immutable except for an internal word cache guarded by a mutex;
//     encode/decode may be called from several threads. Copies share the loaded data.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace gsurg {

namespace detail {
struct TokenizerData;
}

class Tokenizer {
 public:
  // Reads and checks tokenizer.json; throws gsurg::Error("<path>: <reason>").
  static Tokenizer load(const std::string& tokenizer_json_path);

  // add_special_tokens: apply the post-processor's single template (HF's default, as encode(text)).
  std::vector<int> encode(const std::string& text, bool add_special_tokens = true) const;
  std::string decode(const std::vector<int>& ids) const;
  int token_id(const std::string& token) const;  // -1 when absent (added tokens first, then the vocabulary)
  int vocab_size() const;                         // largest id + 1 (added tokens included)

  // The raw bytes token `id` decodes to ("" for an unknown id); what decode() concatenates.
  const std::string& token_bytes(int id) const;

 private:
  explicit Tokenizer(std::shared_ptr<const detail::TokenizerData> data) : data_(std::move(data)) {}
  std::shared_ptr<const detail::TokenizerData> data_;
};

// Feeds ids one at a time and returns only complete UTF-8 text: bytes that may still become a character
// are held back until a later id completes them (or proves them invalid, then they become U+FFFD).
// The concatenation of every push() and finish() equals tok.decode(all ids pushed).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok);
  std::string push(int id);  // text completed by this id ("" while a character is incomplete)
  std::string finish();      // whatever is left (an incomplete tail as U+FFFD, as HF does); resets

 private:
  Tokenizer tok_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence (at most 3)
};

}  // namespace gsurg
