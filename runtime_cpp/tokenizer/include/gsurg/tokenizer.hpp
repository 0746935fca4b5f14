// gsurg::Tokenizer: the BPE of a Hugging Face `tokenizer.json` in the two layouts of the models gsurg runs,
// giving the same ids as HF `tokenizers` `Tokenizer.encode(text).ids` and the same text as
// `Tokenizer.decode(ids, skip_special_tokens=False)`:
//   - byte-level BPE (Qwen2): normalizer NFC or none, the Qwen2 pre-tokenizer (Split on Qwen2's regex, then
//     ByteLevel without regex), the ByteLevel decoder;
//   - SentencePiece-style BPE (Llama-style files): characters with byte fallback ("<0xNN>" tokens), the legacy
//     normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] and/or the Metaspace pre-tokenizer (and Split on
//     literals, how SentencePiece user-defined pieces are written), the decoders Replace / Metaspace,
//     ByteFallback, Fuse, Strip. src/normalizer.hpp, src/metaspace.hpp and src/spm_decoder.hpp say exactly
//     what is accepted.
//
// Contract:
//   - load() accepts a BPE model (vocab + merges as "a b" strings or ["a", "b"] pairs; unk_token, fuse_unk,
//     ignore_merges; byte_fallback with the SentencePiece-style decoders, all 256 byte tokens present), the
//     parts above, a ByteLevel or absent post-processor, or a TemplateProcessing (alone or in a Sequence with
//     ByteLevel); anything else throws gsurg::Error naming the file, the JSON path and what is supported.
//     A TemplateProcessing's "single" template (special tokens around $A, as transformers writes one,
//     the identity "$A" when no BOS/EOS is added) is applied when add_special_tokens is true, as HF's
//     encode(text, add_special_tokens) does; its "pair" template is unused (one sequence at a time). Added
//     tokens get their ids as HF assigns them (the model's id when the content is in the vocabulary, else
//     the next free id in file order). "truncation" and "padding" are ignored (the files it reads set
//     neither; transformers overrides them on every call).
//   - encode(): added tokens are matched first (leftmost-longest; non-normalized ones on the raw text,
//     normalized ones on the normalized text), then each remaining piece is normalized, pre-tokenized and
//     BPE-encoded. Input that is not valid UTF-8 is first repaired like Python's
//     `bytes.decode("utf-8", "replace")` (each maximal invalid subpart becomes U+FFFD), so the ids equal
//     HF's for that repaired string.
//   - decode(): byte-level: the bytes of the tokens (ByteLevel-mapped, or an added token's raw text), with
//     invalid UTF-8 replaced by U+FFFD as Rust's String::from_utf8_lossy does. SentencePiece-style: HF's
//     decoder chain (a run of byte tokens that is not valid UTF-8 gives one U+FFFD per byte, as HF's
//     ByteFallback). Unknown ids are skipped.
//   - Thread safety: a loaded Tokenizer is immutable except for an internal word cache guarded by a mutex;
//     encode/decode may be called from several threads. Copies share the loaded data.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace gsurg {

namespace detail {
struct TokenizerData;

// What a stream has seen: bytes held back (an incomplete UTF-8 character, or a run of byte tokens), the
// number of tokens so far, and how far the decoder's Strip has got at the start of the text.
struct StreamState {
  std::string pending;
  size_t tokens = 0;
  size_t stripped = 0;
  bool started = false;  // some text has been returned
};
}  // namespace detail

class Tokenizer {
 public:
  // Reads and checks tokenizer.json; throws gsurg::Error("<path>: <reason>").
  static Tokenizer load(const std::string& tokenizer_json_path);

  // add_special_tokens: apply the post-processor's single template (HF's default, as encode(text)).
  std::vector<int> encode(const std::string& text, bool add_special_tokens = true) const;
  std::string decode(const std::vector<int>& ids) const;
  int token_id(const std::string& token) const;  // -1 when absent (added tokens first, then the vocabulary)
  int vocab_size() const;                         // largest id + 1 (added tokens included)

  // The bytes token `id` decodes to ("" for an unknown id). Byte-level: what decode() concatenates.
  // SentencePiece-style: the token as a token that is not the first (after the decoder's Replace /
  // Metaspace steps; a byte token as its byte); decode() also strips the start and joins byte runs.
  const std::string& token_bytes(int id) const;

 private:
  friend class StreamDecoder;  // reads the loaded data
  explicit Tokenizer(std::shared_ptr<const detail::TokenizerData> data) : data_(std::move(data)) {}
  std::shared_ptr<const detail::TokenizerData> data_;
};

// Feeds ids one at a time and returns only text that is final: byte-level, bytes that may still become a
// character are held back until a later id completes them (or proves them invalid, then they become
// U+FFFD); SentencePiece-style, a run of byte tokens is held until a token that is not one ends it (HF
// decodes the run as a whole). The concatenation of every push() and finish() equals tok.decode(all ids
// pushed).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok);
  std::string push(int id);  // text completed by this id ("" while a character or byte run is incomplete)
  std::string finish();      // whatever is left (an incomplete tail as U+FFFD, as HF does); resets

 private:
  Tokenizer tok_;
  detail::StreamState state_;
};

}  // namespace gsurg
