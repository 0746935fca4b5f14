// Reading tokenizer.json (see tokenizer_data.hpp): checks that every part is one this implementation
// reproduces exactly (else a gsurg::Error naming the file, the JSON path and what is supported), picks the
// layout by the decoder (ByteLevel: byte-level BPE; else SentencePiece-style), builds the BPE model, and
// assigns added-token ids the way HF's AddedVocabulary::add_tokens does on load (the "id" fields of the file
// are only a hint there too).
#include <nlohmann/json.hpp>

#include <map>
#include <memory>

#include "pretokenize.hpp"
#include "gsurg/error.hpp"
#include "gsurg/files.hpp"
#include "tokenizer_data.hpp"
#include "json_parts.hpp"
#include "tokenizer_json.hpp"

namespace gsurg {
namespace detail {

namespace {

using nlohmann::json;

void check_qwen2_pre_tokenizer(const json& root) {
  const auto parts = flatten_parts(root, "pre_tokenizer", "pretokenizers");
  const std::string expected =
      "the Qwen2 pre-tokenizer (Split with Qwen2's regex, behavior Isolated, then ByteLevel with "
      "add_prefix_space and use_regex false)";
  bool ok = parts.size() == 2 && type_of(parts[0].value) == "Split" && type_of(parts[1].value) == "ByteLevel";
  if (ok) {
    const json& split = parts[0].value;
    const json pattern = split.value("pattern", json());
    ok = pattern.is_object() && pattern.value("Regex", std::string()) == kQwen2SplitRegex &&
         split.value("behavior", std::string()) == "Isolated" && !split.value("invert", false);
    const json& bl = parts[1].value;
    ok = ok && !bl.value("add_prefix_space", true) && !bl.value("use_regex", true);
  }
  if (!ok) throw Error("pre_tokenizer is not supported with the ByteLevel decoder: expected " + expected);
}

// The ids one SpecialToken piece of a TemplateProcessing adds: its entry in "special_tokens".
std::vector<int> template_special(const json& processor, const json& piece) {
  const std::string name = piece.at("id").get<std::string>();
  const json specials = processor.value("special_tokens", json::object());
  if (!specials.is_object() || !specials.contains(name))
    throw Error("post_processor TemplateProcessing: special token \"" + name + "\" is not in special_tokens");
  const json& ids = specials[name].at("ids");
  if (!ids.is_array()) throw Error("post_processor TemplateProcessing: special_tokens \"" + name + "\" ids");
  std::vector<int> out;
  for (const json& id : ids) {
    if (!id.is_number_unsigned() || id.get<unsigned long long>() > 0x7FFFFFFFull)
      throw Error("post_processor TemplateProcessing: special_tokens \"" + name + "\" has an id " +
                  id.dump() + " that is not a token id");
    out.push_back(id.get<int>());
  }
  return out;
}

// A TemplateProcessing's "single" template as HF applies it to one sequence (add_special_tokens): the
// ids of the special tokens before $A, then the sequence, then those after it. The "pair" template is
// never used: the tokenizer encodes one sequence at a time.
void read_template(const json& processor, TokenizerData& data) {
  const json single = processor.value("single", json());
  if (!single.is_array()) throw Error("post_processor TemplateProcessing: \"single\" is not a list");
  int sequences = 0;
  for (const json& piece : single) {
    if (piece.is_object() && piece.size() == 1 && piece.contains("Sequence")) {
      if (piece["Sequence"].value("id", std::string()) != "A")
        throw Error("post_processor TemplateProcessing: the single template names a sequence other than $A");
      ++sequences;
    } else if (piece.is_object() && piece.size() == 1 && piece.contains("SpecialToken")) {
      std::vector<int>& side = sequences == 0 ? data.template_prefix : data.template_suffix;
      for (int id : template_special(processor, piece["SpecialToken"])) side.push_back(id);
    } else {
      throw Error("post_processor TemplateProcessing: a single template piece is neither Sequence nor "
                  "SpecialToken: " + piece.dump());
    }
  }
  if (sequences != 1)
    throw Error("post_processor TemplateProcessing: the single template must hold $A exactly once, not " +
                std::to_string(sequences) + " times");
}

void check_post_processor(const json& root, TokenizerData& data) {
  int templates = 0;
  for (const JsonPart& p : flatten_parts(root, "post_processor", "processors")) {
    if (type_of(p.value) == "TemplateProcessing" && templates++ == 0) {
      read_template(p.value, data);
    } else if (type_of(p.value) != "ByteLevel") {  // ByteLevel only trims offsets: the ids are unchanged
      throw Error(p.path + ": post_processor \"" + type_of(p.value) +
                  "\" is not supported (only ByteLevel, one TemplateProcessing, or none)");
    }
  }
}

// The layout and its pre-tokenizer and decoder: a ByteLevel decoder means byte-level BPE (Qwen2's
// pre-tokenizer required); any other decoder must be a SentencePiece-style one.
void read_layout(const json& root, TokenizerData& data) {
  const json decoder = root.value("decoder", json());
  if (type_of(decoder) == "ByteLevel") {
    check_qwen2_pre_tokenizer(root);
    return;
  }
  data.sentencepiece = true;
  data.spm_decoder.load(root);
  data.spm_pre_tokenizer.load(root);
}

bool same_token(const AddedToken& a, const AddedToken& b) {
  return a.content == b.content && a.single_word == b.single_word && a.lstrip == b.lstrip &&
         a.rstrip == b.rstrip && a.normalized == b.normalized && a.special == b.special;
}

void load_added_tokens(const json& root, TokenizerData& data) {
  const json list = root.value("added_tokens", json::array());
  if (!list.is_array()) throw Error("\"added_tokens\" is not an array");
  std::map<int, AddedToken> by_id;  // HF's added_tokens_map_r
  int next_id = static_cast<int>(data.bpe.vocab_len());
  for (const json& t : list) {
    AddedToken tok;
    tok.content = t.at("content").get<std::string>();
    tok.single_word = t.value("single_word", false);
    tok.lstrip = t.value("lstrip", false);
    tok.rstrip = t.value("rstrip", false);
    tok.normalized = t.value("normalized", true);
    tok.special = t.value("special", false);
    if (tok.content.empty()) continue;
    auto known = data.added_ids.find(tok.content);
    if (known != data.added_ids.end()) {  // the same token twice is ignored
      auto prev = by_id.find(known->second);
      if (prev != by_id.end() && same_token(prev->second, tok)) continue;
    }
    int id;
    if (known != data.added_ids.end()) {
      id = known->second;
    } else if ((id = data.bpe.token_to_id(tok.content)) < 0) {
      id = next_id++;
    }
    tok.id = id;
    data.added_ids[tok.content] = id;
    by_id[id] = tok;
  }
  std::vector<AddedToken> tokens;
  std::vector<std::string> normalized;
  for (auto& kv : by_id) {
    normalized.push_back(kv.second.normalized ? data.normalize(kv.second.content) : kv.second.content);
    tokens.push_back(kv.second);
  }
  data.added.build(tokens, normalized);
}

// Each id's token as the decoder sees it: the vocabulary's token, or an added token's content (normalized
// when the token is: HF decodes it so), and token_bytes(id).
void fill_token_bytes(TokenizerData& data) {
  int max_id = data.bpe.max_id();
  for (const AddedToken& t : data.added.tokens()) max_id = std::max(max_id, t.id);
  const size_t size = static_cast<size_t>(max_id + 1);
  std::vector<std::string> text(size);
  data.known.assign(size, false);
  for (int id = 0; id <= data.bpe.max_id(); ++id) {
    if (const std::string* tok = data.bpe.id_to_token(id)) {
      text[static_cast<size_t>(id)] = *tok;
      data.known[static_cast<size_t>(id)] = true;
    }
  }
  for (const AddedToken& t : data.added.tokens()) {
    text[static_cast<size_t>(t.id)] = t.normalized ? data.normalize(t.content) : t.content;
    data.known[static_cast<size_t>(t.id)] = true;
  }
  data.token_bytes.assign(size, std::string());
  for (size_t id = 0; id < size; ++id) {
    if (!data.known[id]) continue;
    data.token_bytes[id] =
        data.sentencepiece ? data.spm_decoder.piece(text[id]) : data.byte_level.decode_token(text[id]);
  }
  if (data.sentencepiece) data.token_text.swap(text);
}

}  // namespace

void load_tokenizer_json(const std::string& path, TokenizerData& data) {
  const std::string text = read_file(path);
  try {
    TokenizerJson parsed = parse_tokenizer_json(text);
    const json& root = parsed.rest;
    if (root.contains("version") && root["version"] != "1.0") throw Error("unknown tokenizer version");
    data.normalizer.load(root);
    read_layout(root, data);
    check_post_processor(root, data);
    if (!root.contains("model")) throw Error("\"model\" is missing");
    if (!parsed.has_vocab || !parsed.has_merges) throw Error("model.vocab or model.merges is missing");
    data.bpe.load(root["model"], parsed.vocab, parsed.merges, data.sentencepiece ? nullptr : &data.byte_level);
    decltype(parsed.vocab)().swap(parsed.vocab);  // free the copies before the token table is built
    decltype(parsed.merges)().swap(parsed.merges);
    load_added_tokens(root, data);
    fill_token_bytes(data);
  } catch (const json::exception& err) {
    throw Error(path + ": not a valid tokenizer.json: " + err.what());
  } catch (const Error& err) {
    throw Error(path + ": " + err.what());
  }
}

}  // namespace detail
}  // namespace gsurg
