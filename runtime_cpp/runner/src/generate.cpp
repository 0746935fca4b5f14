// Vision -> fused embeddings -> prefill -> decode loop (see generate.hpp).
#include "gsurg/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "gsurg/error.hpp"
#include "gsurg/net_checks.hpp"

namespace gsurg {

namespace {
const int kMaxReservedNewTokens = 8192;  // a huge --gen must not reserve a huge cache up front
}  // namespace

double prefill_bytes_estimate(const ModelConfig& cfg, int64_t length) {
  const double heads = std::max(1, cfg.hidden_size / std::max(1, cfg.decoder.rope_head_dim));
  const double l = static_cast<double>(length);
  return 4.0 * l * l * (heads + 1) + 4.0 * l * cfg.hidden_size * (2.0 * cfg.num_layers + 4);
}

uint64_t available_memory_bytes() {
#ifdef __linux__
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kib = 0;
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f) != nullptr)
    found = std::strncmp(line, "MemAvailable:", 13) == 0 && std::sscanf(line + 13, "%llu", &kib) == 1;
  std::fclose(f);
  return found ? static_cast<uint64_t>(kib) * 1024 : 0;
#else
  return 0;
#endif
}

void check_prefill_memory(const ModelConfig& cfg, int64_t length) {
  const uint64_t available = available_memory_bytes();
  if (available == 0) return;  // unknown: not Linux, or a kernel without MemAvailable
  const double need = prefill_bytes_estimate(cfg, length);
  if (need <= static_cast<double>(available)) return;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  char text[256];
  std::snprintf(text, sizeof text,
                "the prompt has %lld tokens: its prefill would need about %.1f GiB (attention grows with the "
                "square of the prompt length), more than the %.1f GiB of memory available (MemAvailable, "
                "/proc/meminfo)",
                static_cast<long long>(length), need / gib, static_cast<double>(available) / gib);
  throw Error(text);
}

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

Runtime::Runtime(const std::string& model_dir, int threads, bool allow_map, Precision precision,
                 bool quantize_int4_input)
    : cfg_(ModelConfig::load(model_dir, family_)), threads_(threads) {
  for (auto& entry : cfg_.nets) {
    entry.second.precision = precision;
    entry.second.map_weights = allow_map;
    entry.second.quantize_int4_input = quantize_int4_input;
  }
  const double t0 = now_seconds();
  embeddings_.reset(new Embeddings(cfg_, threads_, allow_map));
  decoder_.reset(new Decoder(cfg_, threads_, family_->decoder_inputs()));
  check_llm_nets(cfg_, decoder_->net(), decoder_->lm_head(), embeddings_->net(), family_->decoder_inputs());
  load_seconds_ = now_seconds() - t0;
}

void Runtime::load_vision() {
  if (!vision_loaded_) {
    const double t0 = now_seconds();
    family_->load_vision(cfg_, threads_);
    vision_loaded_ = true;
    load_seconds_ += now_seconds() - t0;
  }
}

GenerateResult Runtime::generate(const std::vector<int>& prompt_ids, const std::vector<PatchInput>& images,
                                 const GenerateOptions& options, const std::function<void(int)>& on_token) {
  GenerateResult result;
  const int length = static_cast<int>(prompt_ids.size());
  result.prompt_tokens = length;
  if (length == 0) throw Error("the prompt is empty");
  if (cfg_.max_positions > 0 && length >= cfg_.max_positions)
    throw Error("the prompt has " + std::to_string(length) + " tokens; the model's context is " +
                std::to_string(cfg_.max_positions) + " positions (max_positions / model_max_length)");
  family_->check_prompt(prompt_ids, images);
  check_prefill_memory(cfg_, length);  // before the prompt's rows, mask and attention are allocated
  if (options.max_new_tokens < 1) throw Error("--gen must be at least 1");
  embeddings_->check_ids(options.forced, -1, "--force-ids: ");

  // Fused prompt embeddings: text rows, the placeholder rows written by the family from the images.
  StepInputs prefill;
  std::vector<float> embeds = embeddings_->rows(prompt_ids, family_->placeholder_id());
  if (!images.empty()) {
    load_vision();  // on first use, outside the timed stage
    const double t0 = now_seconds();
    prefill.extra = family_->fuse_images(cfg_, prompt_ids, images, embeds);
    result.vision_seconds = now_seconds() - t0;
  }
  const std::unique_ptr<Positions> positions = family_->positions(cfg_, prompt_ids, images);

  int budget = options.max_new_tokens;
  const bool context_bound = cfg_.max_positions > 0 && length + budget > cfg_.max_positions;
  if (context_bound) budget = static_cast<int>(cfg_.max_positions - length);
  Sampler sampler(options.sampling);
  std::vector<int> history(prompt_ids);
  // The cache is reserved once for the prompt and the budget (grown by SDPA beyond a capped hint).
  KVSession session(*decoder_, length + std::min(budget, kMaxReservedNewTokens));

  double t0 = now_seconds();
  prefill.rope = positions->tables(0, length);
  std::vector<float> last = session.step(embeds, length, prefill);
  std::vector<float> logits = decoder_->logits(last.data());
  result.prefill_seconds = now_seconds() - t0;

  t0 = now_seconds();
  while (true) {
    const int token = sampler.next(logits, history);
    const size_t picked = result.tokens.size();
    const bool forcing = !options.forced.empty();
    result.tokens.push_back(token);
    on_token(token);
    if ((!options.ignore_eos && !forcing && cfg_.is_eos(token))
        || (forcing && result.tokens.size() >= options.forced.size())) break;
    if (static_cast<int>(result.tokens.size()) >= budget) {
      result.hit_context_limit = context_bound;  // the context, not --gen, ended it
      break;
    }
    const int fed = forcing ? options.forced[picked] : token;
    history.push_back(fed);
    std::vector<float> row = embeddings_->rows({fed});
    StepInputs decode;
    decode.rope = positions->tables(session.position(), 1);
    last = session.step(row, 1, decode);
    logits = decoder_->logits(last.data());
    ++result.decode_steps;
  }
  result.decode_seconds = now_seconds() - t0;
  return result;
}

}  // namespace gsurg
