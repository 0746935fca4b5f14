// The whole inference for one prompt, as ncnn_chain.py chains it: each image through the vision tower,
// the prompt's embeddings with the image features written, in order, over the rows of the image token
// (model.json tokens.image; the prompt holds one image token per patch), prefill of the whole prompt
// through the KV cache, lm_head on the last position, then one-token decode steps until an EOS id of
// model.json (kept as the last token, unless ignore_eos) or max_new_tokens, or the context limit.
// Each new token is handed to on_token as soon as it is chosen (for streaming). Stage times are kept
// for --verbose. The vision nets load on first use, so a text-only prompt never reads them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pvl/decoder.hpp"
#include "pvl/embeddings.hpp"
#include "pvl/model_config.hpp"
#include "pvl/sampler.hpp"
#include "pvl/vision.hpp"

namespace pvl {

struct GenerateOptions {
  int max_new_tokens = 256;
  bool ignore_eos = false;
  SamplingOptions sampling;
};

struct GenerateResult {
  std::vector<int> tokens;  // new tokens, an EOS included when reached
  int prompt_tokens = 0;
  bool hit_context_limit = false;
  double vision_seconds = 0, prefill_seconds = 0, decode_seconds = 0;
  int decode_steps = 0;  // decoder runs after the prefill
};

class Runtime {
 public:
  // allow_map false: the tied embedding rows are read from the file instead of a memory map (a test of
  // the fallback used where mapping fails).
  Runtime(const std::string& model_dir, int threads, bool allow_map = true);
  const ModelConfig& config() const { return cfg_; }
  double load_seconds() const { return load_seconds_; }
  std::string embedding_source() const { return embeddings_->source(); }

  // The vision nets, loaded (and checked against model.json) on first use.
  const VisionTower& vision();

  GenerateResult generate(const std::vector<int>& prompt_ids, const std::vector<PatchInput>& images,
                          const GenerateOptions& options, const std::function<void(int)>& on_token);

 private:
  ModelConfig cfg_;
  int threads_;
  double load_seconds_ = 0;
  std::unique_ptr<Embeddings> embeddings_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<VisionTower> vision_;
};

// Seconds on a monotonic clock (for stage times).
double now_seconds();

}  // namespace pvl
