// The Qwen3-VL family's run: vision nets on first use, image preprocessing, the prompt and its image runs,
// merger rows and DeepStack features over the <|image_pad|> rows, MRoPE positions (see
// family_qwen3_vl.hpp).
#include "gsurg/family_qwen3_vl.hpp"

#include <cstring>
#include <stdexcept>
#include <utility>

#include "gsurg/error.hpp"
#include "gsurg/optional_parts.hpp"

#if GSURG_HAVE_PREPROCESS
#include "gsurg/image.hpp"
#include "gsurg/qwen3_vl_image_processor.hpp"
#endif

namespace gsurg {

void Qwen3VlFamily::load_vision(const ModelConfig& cfg, int threads) {
  if (!tower_) tower_.reset(new Qwen3VlVisionTower(cfg, settings_, threads));
}

ImagePreprocessor Qwen3VlFamily::image_preprocessor() const {
#if GSURG_HAVE_PREPROCESS
  const Qwen3VlImageConfig proc = Qwen3VlImageConfig::from_json(settings_.image_processor);
  return patch_preprocessor([proc](const Image& image) { return qwen3vl_preprocess(image, proc); });
#else
  part_missing("preprocess", "--image", "--pixel-values");
#endif
}

std::vector<MropeImage> Qwen3VlFamily::image_runs(const std::vector<int>& ids,
                                                  const std::vector<PatchInput>& images) const {
  const int merge = settings_.vision.merge_size;
  if (count_id(ids, settings_.video_pad) > 0)
    throw Error("the prompt holds the video token (id " + std::to_string(settings_.video_pad) +
                "); video input is not supported");
  std::vector<MropeImage> runs;
  const int length = static_cast<int>(ids.size());
  int k = 0;
  while (k < length) {
    if (ids[static_cast<size_t>(k)] != settings_.image_pad) {
      ++k;
      continue;
    }
    const size_t n = runs.size();
    if (n >= images.size())
      throw Error("the prompt has more <|image_pad|> runs (id " + std::to_string(settings_.image_pad) +
                  ") than the " + std::to_string(images.size()) + " images given");
    const PatchInput& img = images[n];
    if (img.grid_h % merge != 0 || img.grid_w % merge != 0)
      throw Error("image " + std::to_string(n) + ": a " + std::to_string(img.grid_h) + "x" +
                  std::to_string(img.grid_w) + " patch grid does not split into " + std::to_string(merge) +
                  "x" + std::to_string(merge) + " merge blocks");
    MropeImage run{k, img.grid_h / merge, img.grid_w / merge};
    int end = k;
    while (end < length && ids[static_cast<size_t>(end)] == settings_.image_pad) ++end;
    if (end - k != run.rows * run.cols)
      throw Error("image " + std::to_string(n) + " (" + std::to_string(img.grid_h) + "x" +
                  std::to_string(img.grid_w) + " patches) needs " + std::to_string(run.rows * run.cols) +
                  " <|image_pad|> tokens, but the prompt has a run of " + std::to_string(end - k));
    runs.push_back(run);
    k = end;
  }
  if (runs.size() != images.size())
    throw Error("the prompt has " + std::to_string(runs.size()) + " <|image_pad|> runs but " +
                std::to_string(images.size()) + " images are given");
  return runs;
}

void Qwen3VlFamily::check_prompt(const std::vector<int>& ids, const std::vector<PatchInput>& images) const {
  (void)image_runs(ids, images);
}

std::vector<NetInput> Qwen3VlFamily::fuse_images(const ModelConfig& cfg, const std::vector<int>& ids,
                                                 const std::vector<PatchInput>& images,
                                                 std::vector<float>& embeds) const {
  if (!tower_) throw std::logic_error("fuse_images before load_vision");
  const std::vector<MropeImage> runs = image_runs(ids, images);
  const size_t h = static_cast<size_t>(cfg.hidden_size);
  const int length = static_cast<int>(ids.size());
  std::vector<NetInput> deepstack;
  for (const Qwen3VlTap& t : settings_.vision.taps)
    deepstack.push_back(NetInput{t.decoder_input, length, cfg.hidden_size,
                                 std::vector<float>(static_cast<size_t>(length) * h, 0.0f)});
  for (size_t n = 0; n < images.size(); ++n) {
    const Qwen3VlFeatures f = tower_->encode(images[n]);
    const size_t count = static_cast<size_t>(runs[n].rows) * runs[n].cols;
    if (f.merged.size() != count * h || f.deepstack.size() != deepstack.size())
      throw Error("image " + std::to_string(n) + ": the vision nets gave " +
                  std::to_string(f.merged.size() / h) + " rows for " + std::to_string(count) + " <|image_pad|> tokens");
    const size_t first = static_cast<size_t>(runs[n].first);
    std::memcpy(&embeds[first * h], f.merged.data(), count * h * sizeof(float));
    for (size_t k = 0; k < deepstack.size(); ++k)
      std::memcpy(&deepstack[k].data[first * h], f.deepstack[k].data(), count * h * sizeof(float));
  }
  return deepstack;
}

std::unique_ptr<Positions> Qwen3VlFamily::positions(const ModelConfig& cfg, const std::vector<int>& ids,
                                                    const std::vector<PatchInput>& images) const {
  const DecoderSettings& d = cfg.decoder;
  return std::unique_ptr<Positions>(new MropePositions(static_cast<int>(ids.size()), image_runs(ids, images),
                                                       d.rope_head_dim, d.rope_theta, settings_.mrope_t,
                                                       settings_.mrope_h, settings_.mrope_w,
                                                       settings_.mrope_block));
}

}  // namespace gsurg
