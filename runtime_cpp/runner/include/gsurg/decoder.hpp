// The LLM half between embeddings and logits, as ncnn_chain.py / graphsurgeon.verify.kv_session run it:
// - Decoder: the decoder net (model.json "decoder" blob names) and the lm_head net;
// - KVSession: one sequence. step(hidden [T, H], inputs) feeds the hidden rows, the additive causal mask
//   [T, past+T] (0 / model.json mask_value), the RoPE cos/sin tables the family's position counter made
//   for the step's T tokens ([T, D] or [T, D/2]: 1-D or multimodal RoPE), the family's
//   extra inputs (each of Family::decoder_inputs: the step's NetInput, or zeros [T, hidden_size] when the
//   step has none, e.g. DeepStack features on prefill only), and the past caches: an empty Mat for every
//   cache on the first step (past length 0), afterwards exactly the Mats the previous step returned,
//   extracted with type 1 (ncnn's opaque, panel-packed cache layout, appended in place). Every step's extractor uses the session's own
//   kv-cache allocator (an UnlockedPoolAllocator the cache Mats never outlive) and the max-seqlen hint,
//   so the cache is allocated once for prompt + budget. step returns the last position's hidden row;
// - lm_head logits for one hidden row (the last position only).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <allocator.h>

#include "gsurg/family.hpp"
#include "gsurg/model_config.hpp"
#include "gsurg/nets.hpp"

namespace gsurg {

class Decoder {
 public:
  // extra_inputs: the family's decoder inputs besides the core's (Family::decoder_inputs).
  Decoder(const ModelConfig& cfg, int threads, std::vector<std::string> extra_inputs = {});
  const LoadedNet& net() const { return *decoder_; }
  const LoadedNet& lm_head() const { return *lm_head_; }
  const ModelConfig& config() const { return cfg_; }
  const std::vector<std::string>& extra_inputs() const { return extra_inputs_; }
  // Logits for one hidden row of hidden_size values; their count is lm_head's output width.
  std::vector<float> logits(const float* hidden_row) const;

 private:
  const ModelConfig& cfg_;
  std::vector<std::string> extra_inputs_;
  std::unique_ptr<LoadedNet> decoder_, lm_head_;
};

class KVSession {
 public:
  KVSession(const Decoder& decoder, int max_seqlen_hint);
  ~KVSession();
  KVSession(const KVSession&) = delete;
  KVSession& operator=(const KVSession&) = delete;

  // rows*hidden_size floats, the sequence's tokens position()..position()+rows-1, with their RoPE tables
  // (rows of them) and extra inputs -> the last row's output hidden.
  std::vector<float> step(const std::vector<float>& hidden, int rows, const StepInputs& inputs);
  int position() const { return position_; }

 private:
  const Decoder& decoder_;
  int max_seqlen_hint_;
  int position_ = 0;
  ncnn::UnlockedPoolAllocator allocator_;  // declared before caches_: destroyed after them
  std::vector<ncnn::Mat> caches_;          // model.json cache_inputs order; empty before the first step
};

}  // namespace gsurg
