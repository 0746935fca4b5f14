// The Qwen3 LLM family's run: text only, the tokenizer's ids as the prompt, 1-D positions (see
// family_qwen3_llm.hpp).
#include <stdexcept>

#include "gsurg/error.hpp"
#include "gsurg/family_qwen3_llm.hpp"
#include "gsurg/model_config.hpp"
#include "gsurg/optional_parts.hpp"

#if GSURG_HAVE_TOKENIZER
#include "gsurg/tokenizer.hpp"
#endif

namespace gsurg {

namespace {

[[noreturn]] void refuse_images(const std::string& json_path) {
  throw Error(json_path + ": family qwen3_llm is a text-only LLM: it takes no images");
}

}  // namespace

void Qwen3LlmFamily::load_vision(const ModelConfig& cfg, int threads) {
  (void)threads;
  refuse_images(cfg.json_path);
}

ImagePreprocessor Qwen3LlmFamily::image_preprocessor() const { refuse_images(json_path_); }

std::vector<int> Qwen3LlmFamily::prompt_ids(const Tokenizer& tok, const std::string& user_text,
                                            const std::vector<PatchInput>& images) const {
  if (!images.empty()) refuse_images(json_path_);
  if (user_text.find_first_not_of(" \t\r\n") == std::string::npos) throw Error("the prompt is empty");
#if GSURG_HAVE_TOKENIZER
  return tok.encode(user_text);
#else
  (void)tok;
  part_missing("tokenizer", "--prompt", "--ids");
#endif
}

void Qwen3LlmFamily::check_prompt(const std::vector<int>& ids, const std::vector<PatchInput>& images) const {
  (void)ids;
  if (!images.empty()) refuse_images(json_path_);
}

std::vector<NetInput> Qwen3LlmFamily::fuse_images(const ModelConfig& cfg, const std::vector<int>& ids,
                                                  const std::vector<PatchInput>& images,
                                                  std::vector<float>& embeds) const {
  (void)cfg;
  (void)ids;
  (void)images;
  (void)embeds;
  throw std::logic_error("fuse_images on a text-only family (check_prompt refuses images)");
}

std::unique_ptr<Positions> Qwen3LlmFamily::positions(const ModelConfig& cfg, const std::vector<int>& ids,
                                                     const std::vector<PatchInput>& images) const {
  (void)ids;
  (void)images;
  const DecoderSettings& d = cfg.decoder;
  return std::unique_ptr<Positions>(new TextPositions(d.rope_head_dim, d.rope_theta, d.rope_full_width));
}

}  // namespace gsurg
