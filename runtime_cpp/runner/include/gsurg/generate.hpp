// The whole inference for one prompt, the same for every family: the prompt checked against the images
// (Family::check_prompt), its embedding rows with the images fused in by the family (Family::fuse_images:
// vision nets, features over the placeholder rows, extra prefill inputs), prefill of the whole prompt
// through the KV cache with the family's RoPE tables (Family::positions), lm_head on the last position,
// then one-token decode steps until an EOS id of model.json (kept as the last token, unless ignore_eos)
// or max_new_tokens, or the context limit. Each new token is handed to on_token as soon as it is chosen
// (for streaming). Stage times are kept for --verbose. The vision nets load on first use, so a
// text-only prompt never reads them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gsurg/decoder.hpp"
#include "gsurg/embeddings.hpp"
#include "gsurg/family.hpp"
#include "gsurg/model_config.hpp"
#include "gsurg/sampler.hpp"

namespace gsurg {

// Prompt rows per prefill run unless --prefill-chunk says otherwise (GenerateOptions::prefill_chunk).
constexpr int kDefaultPrefillChunk = 512;

struct GenerateOptions {
  int max_new_tokens = 256;
  bool ignore_eos = false;
  SamplingOptions sampling;
  // Teacher forcing when not empty: the model still picks every new token (result.tokens), but the token
  // fed back after pick i is forced[i] (and the sampler's history holds the forced ones). Picks stop after
  // forced.size() tokens or max_new_tokens, whichever comes first; EOS stops nothing.
  std::vector<int> forced;
  // The prompt's rows fed to the decoder per run: the prefill runs in chunks of this many rows (each
  // attending to the cache of the ones before), so its attention memory grows with chunk x prompt length,
  // not the prompt length squared; 0 feeds the whole prompt in one run.
  int prefill_chunk = kDefaultPrefillChunk;
};

struct GenerateResult {
  std::vector<int> tokens;  // new tokens, an EOS included when reached
  int prompt_tokens = 0;
  bool hit_context_limit = false;  // generation ended because the context (max_positions) was full, short
                                   // of max_new_tokens (not at EOS, not at the last forced id)
  double vision_seconds = 0, prefill_seconds = 0, decode_seconds = 0;
  int decode_steps = 0;  // decoder runs after the prefill
};

class Runtime {
 public:
  // allow_map false: every net's .bin and the tied embedding rows are read from the files instead of
  // memory maps (NetFiles::map_weights; the fallback used where mapping fails, and a test of it).
  // precision: how every net runs (NetFiles::precision); quantize_int4_input: NetFiles::quantize_int4_input
  // for every net.
  Runtime(const std::string& model_dir, int threads, bool allow_map = true,
          Precision precision = Precision::kFp32, bool quantize_int4_input = false);
  const ModelConfig& config() const { return cfg_; }
  const Family& family() const { return *family_; }
  double load_seconds() const { return load_seconds_; }
  std::string embedding_source() const { return embeddings_->source(); }

  // The family's vision nets, loaded (and checked against model.json) on first use.
  void load_vision();

  GenerateResult generate(const std::vector<int>& prompt_ids, const std::vector<PatchInput>& images,
                          const GenerateOptions& options, const std::function<void(int)>& on_token);

 private:
  std::unique_ptr<Family> family_;  // before cfg_: ModelConfig::load makes it
  ModelConfig cfg_;
  int threads_;
  bool vision_loaded_ = false;
  double load_seconds_ = 0;
  std::unique_ptr<Embeddings> embeddings_;
  std::unique_ptr<Decoder> decoder_;
};

// The bytes a prefill of `length` prompt tokens, fed `chunk` rows per decoder run (chunk >= length or 0:
// all at once), is estimated to need beyond the loaded weights (runner/README.md, the limits): with
// C = min(chunk, length), 4·C·L·(H + 1) for one layer's attention scores over H query heads (H =
// hidden_size / decoder.rope.head_dim, at least 1) and the causal mask, 4·L·hidden_size·(2·num_layers + 1)
// for the KV cache and the prompt's embeddings, and 4·C·hidden_size·4 for one run's activations. A double:
// it cannot overflow.
double prefill_bytes_estimate(const ModelConfig& cfg, int64_t length, int64_t chunk);
// How many more bytes this process may allocate, and which limit says so: on Linux the least of
// MemAvailable (/proc/meminfo), the address-space limit (RLIMIT_AS, ulimit -v) less the process's VmSize
// (/proc/self/status), and its cgroup v2 memory.max less memory.current; none (source "") elsewhere.
struct MemoryRoom {
  uint64_t bytes = 0;
  std::string source;  // "" when no limit could be read
};
MemoryRoom available_memory();
// available_memory().bytes (0 when unknown).
uint64_t available_memory_bytes();
// Throws gsurg::Error (the prompt length, the estimate, the limit and its source) when the estimate exceeds
// available_memory(); checks nothing when no limit is known.
void check_prefill_memory(const ModelConfig& cfg, int64_t length, int64_t chunk);

// Seconds on a monotonic clock (for stage times).
double now_seconds();

}  // namespace gsurg
