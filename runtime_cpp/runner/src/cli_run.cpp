// The program's main flow: model, prompt, images, generation with streamed output (see cli.hpp); what is
// particular to the model (preprocessing, the prompt) is asked of its family.
#include <cpu.h>

#include <algorithm>
#include <memory>
#include <string>

#include "gsurg/cli.hpp"
#include "gsurg/error.hpp"
#include "gsurg/family.hpp"
#include "gsurg/family_registry.hpp"
#include "gsurg/generate.hpp"
#include "gsurg/huge_pages.hpp"
#include "gsurg/lowbit_gemm.hpp"
#include "gsurg/optional_parts.hpp"
#include "gsurg/pixel_file.hpp"
#include "gsurg/weight_widening.hpp"

#if GSURG_HAVE_TOKENIZER
#include "gsurg/tokenizer.hpp"
#endif
#if GSURG_HAVE_PREPROCESS
#include "gsurg/image.hpp"
#endif

namespace gsurg {

namespace {

std::vector<PatchInput> load_images(const CliArgs& args, const Family& family) {
  std::vector<PatchInput> out;
  for (const std::string& path : args.pixel_files) out.push_back(read_pixel_file(path));
  if (args.images.empty()) return out;
#if GSURG_HAVE_PREPROCESS
  const ImagePreprocessor preprocess = family.image_preprocessor();
  for (const std::string& path : args.images) {
    const Image image = load_image(path);  // its errors name the path
    try {
      out.push_back(preprocess(image));
    } catch (const Error& err) {  // the family's refusals (size, aspect ratio) name the image they refuse
      throw Error(path + ": " + err.what());
    }
  }
  return out;
#else
  (void)family;
  part_missing("preprocess", "--image", "--pixel-values");
#endif
}

std::string ids_json(const std::vector<int>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

}  // namespace

int run(const CliArgs& args, std::FILE* out, std::FILE* log) {
  const double t_start = now_seconds();
  const int threads = args.threads > 0 ? args.threads : std::max(1, ncnn::get_physical_big_cpu_count());
  if (args.has_prompt && args.prompt.find_first_not_of(" \t\r\n") == std::string::npos)
    throw Error("the prompt is empty");
  if (args.has_ids && args.ids.empty()) throw Error("--ids is empty");
  huge_pages::set_enabled(args.huge_pages);
  Runtime runtime(args.model, threads, !args.no_mmap, args.precision, args.int4_activations_int8);
  const ModelConfig& cfg = runtime.config();
#if GSURG_HAVE_TOKENIZER
  const Tokenizer tok = Tokenizer::load(cfg.tokenizer_json);
#endif
  // The vision nets are checked against model.json before any image is preprocessed with its settings.
  if (!args.images.empty() || !args.pixel_files.empty()) runtime.load_vision();
  double t0 = now_seconds();
  const std::vector<PatchInput> images = load_images(args, runtime.family());
  const double preprocess_seconds = now_seconds() - t0;

  std::vector<int> ids;
  if (args.has_ids) {
    ids = args.ids;
  } else {
#if GSURG_HAVE_TOKENIZER
    ids = runtime.family().prompt_ids(tok, args.prompt, images);
#else
    part_missing("tokenizer", "--prompt", "--ids");
#endif
  }

  GenerateOptions options;
  options.max_new_tokens = args.gen;
  options.ignore_eos = args.ignore_eos;
  options.forced = args.force_ids;
  options.sampling = args.sampling;
#if GSURG_HAVE_TOKENIZER
  StreamDecoder stream(tok);
#endif
  auto on_token = [&](int id) {
    if (!args.ignore_eos && args.force_ids.empty() && cfg.is_eos(id)) return;  // EOS ends the answer
#if GSURG_HAVE_TOKENIZER
    const std::string text = stream.push(id);
#else
    const std::string text = " " + std::to_string(id);
#endif
    std::fwrite(text.data(), 1, text.size(), out);
    std::fflush(out);
  };
  GenerateResult result = runtime.generate(ids, images, options, on_token);
#if GSURG_HAVE_TOKENIZER
  const std::string tail = stream.finish();
  std::fwrite(tail.data(), 1, tail.size(), out);
#endif
  std::fputc('\n', out);
  if (args.print_ids) {
    const std::string prompt = ids_json(ids), json = ids_json(result.tokens);
    std::fprintf(out, "{\"prompt_tokens\": %d, \"prompt_ids\": %s, \"tokens\": %s}\n", result.prompt_tokens,
                 prompt.c_str(), json.c_str());
  }
  std::fflush(out);
  if (args.verbose) {
    const int n = static_cast<int>(result.tokens.size());
    const double prefill_s = result.prefill_seconds, decode_s = result.decode_seconds;
    const double prefill_rate = prefill_s > 0 ? result.prompt_tokens / prefill_s : 0.0;
    const double decode_rate = decode_s > 0 ? result.decode_steps / decode_s : 0.0;
    const char* precision = args.precision == Precision::kFp16 ? "fp16"
                            : args.precision == Precision::kAuto ? "auto" : "fp32";
    std::fprintf(log, "model: %s, %d threads, precision %s, embeddings from %s\n", cfg.folder.c_str(),
                 threads, precision, runtime.embedding_source().c_str());
    std::fprintf(log, "load: %.3f s\n", runtime.load_seconds());
    if (huge_pages::supported())
      std::fprintf(log, "huge pages: %s, %.1f MiB advised\n", huge_pages::enabled() ? "on (--huge-pages)" : "off",
                   static_cast<double>(huge_pages::advised_bytes()) / (1 << 20));
    if (const int packed = packed_gemm_layers())
      std::fprintf(log, "4/6-bit Gemms: %d through gsurg's %s kernel\n", packed, lowbit_kernel_in_use());
    if (const int w4a8 = w4a8_gemm_layers())
      std::fprintf(log, "4-bit Gemms: %d through gsurg's w4a8 %s kernel (--int4-activations int8)\n", w4a8,
                   w4a8::instance_name());
    else if (args.int4_activations_int8)
      std::fprintf(log, "4-bit Gemms: none through the w4a8 kernel (%s)\n",
                   w4a8::accelerated() ? "no 4-bit Gemm it takes" : "no SIMD instance on this CPU");
    if (const int int8 = int8_gemm_layers())
      std::fprintf(log, "8-bit Gemms: %d through gsurg's %s kernel\n", int8, int8k::kernel_name());
    if (const int widened = widened_weights())
      std::fprintf(log, "2-byte Gemm weights: %d widened to fp32 by the runner\n", widened);
    if (!images.empty()) {
      const int count = static_cast<int>(images.size());
      std::fprintf(log, "preprocess: %.3f s (%d images)\n", preprocess_seconds, count);
      std::fprintf(log, "vision: %.3f s\n", result.vision_seconds);
    }
    std::fprintf(log, "prefill: %d tokens in %.3f s (%.1f tok/s)\n", result.prompt_tokens, prefill_s,
                 prefill_rate);
    std::fprintf(log, "decode: %d tokens in %.3f s (%.1f tok/s)%s\n", n, decode_s, decode_rate,
                 result.hit_context_limit && n > 0 ? " (stopped at the context limit)" : "");
    std::fprintf(log, "total: %.3f s\n", now_seconds() - t_start);
  }
  return 0;
}

}  // namespace gsurg
