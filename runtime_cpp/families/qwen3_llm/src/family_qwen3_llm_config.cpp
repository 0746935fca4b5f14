// The Qwen3 LLM family's registry entry and model.json (see family_qwen3_llm.hpp). It reads no key of its
// own: the core reads them all (model_config.cpp); tests/test_model_json_schema.py holds the keys the core
// reads to graphsurgeon/models/qwen3_llm/qwen3_llm.v3.schema.json, and kFamily / kVersion to its constants.
#include "gsurg/family_qwen3_llm.hpp"
#include "gsurg/json_access.hpp"
#include "gsurg/model_config.hpp"

namespace gsurg {

namespace {

const char* const kFamily = "qwen3_llm";
const int64_t kVersion = 3;
// format of the model.json files written before they had a family (version 1)
const char* const kUnversionedFormat = "gsurg-llm-kv-cache";

std::unique_ptr<Family> make_qwen3_llm() { return std::unique_ptr<Family>(new Qwen3LlmFamily()); }

}  // namespace

FamilyEntry qwen3_llm_entry() { return FamilyEntry{kFamily, kVersion, kUnversionedFormat, make_qwen3_llm}; }

std::string Qwen3LlmFamily::name() const { return kFamily; }

// No nets besides the core's embed, decoder and lm_head.
std::vector<std::string> Qwen3LlmFamily::net_names(const JsonDoc& doc) const {
  (void)doc;
  return {};
}

std::vector<std::string> Qwen3LlmFamily::required_nets(const JsonDoc& doc) const {
  (void)doc;
  return {};
}

void Qwen3LlmFamily::read_config(const JsonDoc& doc, const ModelConfig& cfg) {
  (void)cfg;
  json_path_ = doc.file();
}

}  // namespace gsurg
