// Vision -> fused embeddings -> prefill -> decode loop (see generate.hpp).
#include "pvl/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "pvl/error.hpp"
#include "pvl/net_checks.hpp"
#include "pvl/prompt.hpp"

namespace pvl {

namespace {
const int kMaxReservedNewTokens = 8192;  // a huge --gen must not reserve a huge cache up front
}  // namespace

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

Runtime::Runtime(const std::string& model_dir, int threads, bool allow_map)
    : cfg_(ModelConfig::load(model_dir)), threads_(threads) {
  const double t0 = now_seconds();
  embeddings_.reset(new Embeddings(cfg_, threads_, allow_map));
  decoder_.reset(new Decoder(cfg_, threads_));
  check_llm_nets(cfg_, decoder_->net(), decoder_->lm_head(), embeddings_->net());
  load_seconds_ = now_seconds() - t0;
}

const VisionTower& Runtime::vision() {
  if (!vision_) {
    const double t0 = now_seconds();
    vision_.reset(new VisionTower(cfg_, threads_));
    load_seconds_ += now_seconds() - t0;
  }
  return *vision_;
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
  int image_rows = 0;
  for (const PatchInput& img : images) image_rows += img.grid_h * img.grid_w;
  const int image_ids = count_id(prompt_ids, cfg_.image_token);
  if (image_ids != image_rows)
    throw Error("the prompt has " + std::to_string(image_ids) + " image tokens (id " +
                std::to_string(cfg_.image_token) + ") but the images give " + std::to_string(image_rows) +
                " feature rows");
  if (options.max_new_tokens < 1) throw Error("--gen must be at least 1");

  // Fused prompt embeddings: text rows, then the image features over the image-token rows in order.
  std::vector<float> embeds = embeddings_->rows(prompt_ids, cfg_.image_token);
  const size_t h = static_cast<size_t>(cfg_.hidden_size);
  if (!images.empty()) {
    const VisionTower& tower = vision();  // loaded on first use, outside the timed stage
    const double t0 = now_seconds();
    size_t next = 0;
    for (const PatchInput& img : images) {
      std::vector<float> features = tower.encode(img);
      for (size_t r = 0; r < features.size() / h; ++r) {
        while (prompt_ids[next] != cfg_.image_token) ++next;
        std::memcpy(&embeds[next * h], &features[r * h], h * sizeof(float));
        ++next;
      }
    }
    result.vision_seconds = now_seconds() - t0;
  }

  int budget = options.max_new_tokens;
  if (cfg_.max_positions > 0 && length + budget > cfg_.max_positions) {
    budget = static_cast<int>(cfg_.max_positions - length);
    result.hit_context_limit = true;
  }
  Sampler sampler(options.sampling);
  std::vector<int> history(prompt_ids);
  // The cache is reserved once for the prompt and the budget (grown by SDPA beyond a capped hint).
  KVSession session(*decoder_, length + std::min(budget, kMaxReservedNewTokens));

  double t0 = now_seconds();
  std::vector<float> last = session.step(embeds, length);
  std::vector<float> logits = decoder_->logits(last.data());
  result.prefill_seconds = now_seconds() - t0;

  t0 = now_seconds();
  while (true) {
    const int token = sampler.next(logits, history);
    result.tokens.push_back(token);
    history.push_back(token);
    on_token(token);
    if ((!options.ignore_eos && cfg_.is_eos(token))
        || static_cast<int>(result.tokens.size()) >= budget) break;
    std::vector<float> row = embeddings_->rows({token});
    last = session.step(row, 1);
    logits = decoder_->logits(last.data());
    ++result.decode_steps;
  }
  result.decode_seconds = now_seconds() - t0;
  return result;
}

}  // namespace pvl
