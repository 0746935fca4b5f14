// The Qwen3 LLM family (model.json "family": "qwen3_llm", version 3; the file's contract is
// graphsurgeon/models/qwen3_llm/qwen3_llm.v3.schema.json): the text-only model rules/llm-kv-cache.yaml
// converts. What it adds to the core is what it leaves out:
// - model.json: no keys of its own (the core reads the nets embed / decoder / lm_head, decoder.*, tokens.eos,
//   tokenizer.*, the sizes); the tied rows come from the embed net (the file has no embedding_matrix), as
//   graphsurgeon/verify/llm_chain.py takes them;
// - images: none; an image (--image, --pixel-values, a batch request's "images") is refused naming the
//   model, before anything is read;
// - the prompt: the tokenizer's ids of the text as it is, no chat template (what the trained fixture
//   graphsurgeon/models/qwen3_llm/trained was trained on: train.py, evaluate.py); a checkpoint without
//   tokenizer files runs on --ids only (the core says so);
// - positions: the core's 1-D TextPositions, no extra decoder inputs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gsurg/family.hpp"
#include "gsurg/family_registry.hpp"

namespace gsurg {

FamilyEntry qwen3_llm_entry();

class Qwen3LlmFamily : public Family {
 public:
  std::string name() const override;
  std::vector<std::string> net_names(const JsonDoc& doc) const override;
  std::vector<std::string> required_nets(const JsonDoc& doc) const override;
  void read_config(const JsonDoc& doc, const ModelConfig& cfg) override;
  // Both refuse: the model takes no images (the error names model.json).
  void load_vision(const ModelConfig& cfg, int threads) override;
  ImagePreprocessor image_preprocessor() const override;
  // The tokenizer's ids of user_text (its post-processor applied, as HF's Tokenizer.encode(text)); throws
  // gsurg::Error for an empty text or any image.
  std::vector<int> prompt_ids(const Tokenizer& tok, const std::string& user_text,
                              const std::vector<PatchInput>& images) const override;
  void check_prompt(const std::vector<int>& ids, const std::vector<PatchInput>& images) const override;
  int placeholder_id() const override { return -1; }
  std::vector<NetInput> fuse_images(const ModelConfig& cfg, const std::vector<int>& ids,
                                    const std::vector<PatchInput>& images,
                                    std::vector<float>& embeds) const override;
  std::unique_ptr<Positions> positions(const ModelConfig& cfg, const std::vector<int>& ids,
                                       const std::vector<PatchInput>& images) const override;

 private:
  std::string json_path_;  // model.json, for the refusals
};

}  // namespace gsurg
