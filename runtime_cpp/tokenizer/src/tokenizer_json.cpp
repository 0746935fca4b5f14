// SAX reader of tokenizer.json (see tokenizer_json.hpp). Containers of the kept document are tracked by a
// stack of pointers; a pointer into an array stays valid because an array only grows while it is the
// innermost open container (its open child, if any, has been closed by then).
#include "tokenizer_json.hpp"

#include "gsurg/error.hpp"

namespace gsurg {

namespace {

using nlohmann::json;

class Reader {
 public:
  explicit Reader(TokenizerJson& out) : out_(out) {}

  // --- the nlohmann SAX interface -------------------------------------------------------------------
  bool null() { return scalar(json(nullptr)); }
  bool boolean(bool v) { return scalar(json(v)); }
  bool number_integer(json::number_integer_t v) { return vocab_value(v) || scalar(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) {
    return vocab_value(static_cast<long long>(v)) || scalar(json(v));
  }
  bool number_float(json::number_float_t v, const std::string&) { return scalar(json(v)); }
  bool binary(json::binary_t& v) { return scalar(json(v)); }
  bool string(std::string& v) {
    if (in_merges() && depth_ == 3) return legacy_merge(v);
    if (in_merges() && depth_ == 4) {
      if (pair_.size() >= 2) throw Error("a merge is not a pair of strings");
      pair_.push_back(std::move(v));
      return true;
    }
    return scalar(json(std::move(v)));
  }
  bool key(std::string& k) {
    if (in_vocab()) {
      vocab_key_ = std::move(k);
      return true;
    }
    key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const json::exception& err) {
    throw Error(std::string("invalid JSON: ") + err.what());
  }

 private:
  // The path of open containers by key: depth_ 1 = the root object, 2 = "model", 3 = "model"."vocab".
  bool in_vocab() const { return depth_ == 3 && skipping_ == kVocab; }
  bool in_merges() const { return depth_ >= 3 && skipping_ == kMerges; }

  bool vocab_value(long long v) {
    if (!in_vocab()) return false;
    out_.vocab.emplace_back(std::move(vocab_key_), v);
    return true;
  }

  bool legacy_merge(const std::string& line) {
    if (line.rfind("#version", 0) == 0) return true;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos) {
      throw Error("merge " + std::to_string(out_.merges.size() + 1) + " \"" + line + "\" is not \"a b\"");
    }
    out_.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    return true;
  }

  bool scalar(json v) {
    if (skipping_ != kNone) throw Error(skipping_ == kVocab ? "a vocabulary id is not an integer"
                                                            : "a merge is neither \"a b\" nor [\"a\", \"b\"]");
    insert(std::move(v));
    return true;
  }

  json* insert(json v) {
    if (stack_.empty()) {
      out_.rest = std::move(v);
      return &out_.rest;
    }
    json& parent = *stack_.back();
    if (parent.is_object()) return &(parent[key_] = std::move(v));
    parent.push_back(std::move(v));
    return &parent.back();
  }

  bool open(json container) {
    ++depth_;
    if (depth_ == 3 && skipping_ == kNone && path_model_ && (key_ == "vocab" || key_ == "merges")) {
      const bool is_vocab = key_ == "vocab";
      if (is_vocab != container.is_object()) throw Error(std::string("model.") + key_ + " has the wrong type");
      skipping_ = is_vocab ? kVocab : kMerges;
      (is_vocab ? out_.has_vocab : out_.has_merges) = true;
      return true;
    }
    if (skipping_ == kMerges && depth_ == 4 && container.is_array()) {
      pair_.clear();
      return true;
    }
    if (skipping_ != kNone) return scalar(json());  // throws: nested value inside vocab / merges
    if (depth_ == 2) path_model_ = key_ == "model";
    stack_.push_back(insert(std::move(container)));
    return true;
  }

  bool close() {
    if (skipping_ != kNone) {
      if (depth_ == 4) {  // end of a ["a", "b"] merge
        if (pair_.size() != 2) throw Error("a merge is not a pair of strings");
        out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      } else if (depth_ == 3) {
        skipping_ = kNone;
      }
      --depth_;
      return true;
    }
    stack_.pop_back();
    if (depth_ == 2) path_model_ = false;
    --depth_;
    return true;
  }

  enum Skip { kNone, kVocab, kMerges };
  TokenizerJson& out_;
  std::vector<json*> stack_;
  std::string key_, vocab_key_;
  std::vector<std::string> pair_;
  int depth_ = 0;
  bool path_model_ = false;  // the open depth-2 container is "model"
  Skip skipping_ = kNone;
};

}  // namespace

TokenizerJson parse_tokenizer_json(const std::string& text) {
  TokenizerJson out;
  Reader reader(out);
  json::sax_parse(text, &reader);
  if (!out.rest.is_object()) throw Error("not a JSON object");
  return out;
}

}  // namespace gsurg
