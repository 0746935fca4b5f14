// Qwen3-VL's chat template and prompt ids (see family_qwen3_vl.hpp).
#include "gsurg/error.hpp"
#include "gsurg/optional_parts.hpp"
#include "gsurg/family_qwen3_vl.hpp"

#if GSURG_HAVE_TOKENIZER
#include "gsurg/tokenizer.hpp"
#endif

namespace gsurg {

namespace {
const char kImStart[] = "<|im_start|>";
const char kImEnd[] = "<|im_end|>";
}  // namespace

std::string qwen3_vl_chat_prompt(const std::string& user_text, const std::vector<int>& image_tokens,
                                 const std::string& vision_start, const std::string& image_pad,
                                 const std::string& vision_end) {
  std::string body;
  for (int count : image_tokens) {
    body += vision_start;
    for (int i = 0; i < count; ++i) body += image_pad;
    body += vision_end;
  }
  body += user_text;
  return std::string(kImStart) + "user\n" + body + kImEnd + "\n" + kImStart + "assistant\n";
}

std::vector<int> Qwen3VlFamily::prompt_ids(const Tokenizer& tok, const std::string& user_text,
                                           const std::vector<PatchInput>& images) const {
#if GSURG_HAVE_TOKENIZER
  if (user_text.find_first_not_of(" \t\r\n") == std::string::npos) throw Error("the prompt is empty");
  for (const char* marker : {kImStart, kImEnd}) {
    if (tok.token_id(marker) < 0)
      throw Error(std::string("the tokenizer has no token \"") + marker + "\" (the chat template needs it)");
  }
  const struct {
    const char* key;
    int id;
  } specials[] = {{"tokens.image_pad", settings_.image_pad},
                  {"tokens.video_pad", settings_.video_pad},
                  {"tokens.vision_start", settings_.vision_start},
                  {"tokens.vision_end", settings_.vision_end}};
  std::string text[4];
  for (size_t i = 0; i < 4; ++i) {
    text[i] = tok.decode({specials[i].id});
    if (text[i].empty() || tok.token_id(text[i]) != specials[i].id)
      throw Error("the tokenizer has no token for the id " + std::to_string(specials[i].id) +
                  " of model.json " + specials[i].key);
    if (user_text.find(text[i]) != std::string::npos)
      throw Error("the prompt text contains the special token \"" + text[i] + "\" (model.json " +
                  specials[i].key + "); images are given with --image" +
                  (i == 1 ? ", and videos are not supported" : ""));
  }
  const int merge = settings_.vision.merge_size;
  std::vector<int> image_tokens;
  for (const PatchInput& img : images) image_tokens.push_back((img.grid_h / merge) * (img.grid_w / merge));
  std::vector<int> ids = tok.encode(qwen3_vl_chat_prompt(user_text, image_tokens, text[2], text[0], text[3]));
  int expected = 0;
  for (int n : image_tokens) expected += n;
  if (count_id(ids, settings_.image_pad) != expected)
    throw Error("the prompt encodes to " + std::to_string(count_id(ids, settings_.image_pad)) +
                " <|image_pad|> tokens, expected " + std::to_string(expected));
  return ids;
#else
  (void)tok;
  (void)user_text;
  (void)images;
  part_missing("tokenizer", "--prompt", "--ids");
#endif
}

}  // namespace gsurg
