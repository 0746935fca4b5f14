// Penguin-VL's chat template and prompt ids (see family_penguin_vl.hpp).
#include "gsurg/error.hpp"
#include "gsurg/optional_parts.hpp"
#include "gsurg/family_penguin_vl.hpp"

#if GSURG_HAVE_TOKENIZER
#include "gsurg/tokenizer.hpp"
#endif

namespace gsurg {

namespace {
const char kImStart[] = "<|im_start|>";
const char kImEnd[] = "<|im_end|>";
const char kEmptyThink[] = "<think>\n\n</think>\n\n";
}  // namespace

std::string penguin_chat_prompt(const std::string& user_text, const std::vector<int>& image_tokens,
                                const std::string& image_token) {
  std::string body;
  for (int count : image_tokens) {
    for (int i = 0; i < count; ++i) body += image_token;
    body += "\n";
  }
  body += user_text;
  return std::string(kImStart) + "user\n" + body + kImEnd + "\n" + kImStart + "assistant\n" + kEmptyThink;
}

std::vector<int> PenguinVlFamily::prompt_ids(const Tokenizer& tok, const std::string& user_text,
                                             const std::vector<PatchInput>& images) const {
#if GSURG_HAVE_TOKENIZER
  std::vector<int> image_tokens;  // one placeholder per patch
  for (const PatchInput& img : images) image_tokens.push_back(img.grid_h * img.grid_w);
  const int image_id = settings_.image_token;
  if (user_text.find_first_not_of(" \t\r\n") == std::string::npos) throw Error("the prompt is empty");
  for (const char* marker : {kImStart, kImEnd, "<think>", "</think>"}) {
    if (tok.token_id(marker) < 0)
      throw Error(std::string("the tokenizer has no token \"") + marker + "\" (the chat template needs it)");
  }
  const std::string image_token = tok.decode({image_id});
  if (image_token.empty() || tok.token_id(image_token) != image_id)
    throw Error("the tokenizer has no token for the image id " + std::to_string(image_id) + " of model.json");
  if (user_text.find(image_token) != std::string::npos)
    throw Error("the prompt text contains the image token \"" + image_token
        + "\"; images are given with --image");
  std::vector<int> ids = tok.encode(penguin_chat_prompt(user_text, image_tokens, image_token));
  int expected = 0;
  for (int n : image_tokens) expected += n;
  if (count_id(ids, image_id) != expected)
    throw Error("the prompt encodes to " + std::to_string(count_id(ids, image_id))
        + " image tokens, expected " +
                std::to_string(expected));
  return ids;
#else
  (void)tok;
  (void)user_text;
  (void)images;
  part_missing("tokenizer", "--prompt", "--ids");
#endif
}

}  // namespace gsurg
