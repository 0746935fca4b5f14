// The program's main flow: model, prompt, images, generation with streamed output (see cli.hpp), or, with
// --batch, one result line per request line (batch.hpp); what is particular to the model (preprocessing, the
// prompt) is asked of its family.
#include <cpu.h>

#include <algorithm>
#include <memory>
#include <string>

#include "gsurg/batch.hpp"
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

std::vector<PatchInput> load_images(const std::vector<std::string>& paths,
                                    const std::vector<std::string>& pixel_files, const Family& family) {
  std::vector<PatchInput> out;
  for (const std::string& path : pixel_files) out.push_back(read_pixel_file(path));
  if (paths.empty()) return out;
#if GSURG_HAVE_PREPROCESS
  const ImagePreprocessor preprocess = family.image_preprocessor();
  for (const std::string& path : paths) {
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

int thread_count(const CliArgs& args) {
  return args.threads > 0 ? args.threads : std::max(1, ncnn::get_physical_big_cpu_count());
}

#if GSURG_HAVE_TOKENIZER
// The model's tokenizer, or none when its model.json names none (a checkpoint without tokenizer files).
std::unique_ptr<Tokenizer> load_tokenizer(const ModelConfig& cfg) {
  if (!cfg.has_tokenizer()) return nullptr;
  return std::unique_ptr<Tokenizer>(new Tokenizer(Tokenizer::load(cfg.tokenizer_json)));
}
#endif

// A text prompt's ids: the family's template through the tokenizer. text_input names where the text came
// from, ids_input what gives ids instead.
std::vector<int> text_prompt_ids(const Runtime& runtime, const Tokenizer* tokenizer, const std::string& text,
                                 const std::vector<PatchInput>& images, const char* text_input,
                                 const char* ids_input) {
  const ModelConfig& cfg = runtime.config();
  if (!cfg.has_tokenizer())
    throw Error(cfg.json_path + " names no tokenizer (its checkpoint had none): give the prompt as token ids ("
        + ids_input + ")");
#if GSURG_HAVE_TOKENIZER
  (void)text_input;
  return runtime.family().prompt_ids(*tokenizer, text, images);
#else
  (void)tokenizer;
  (void)text;
  (void)images;
  part_missing("tokenizer", text_input, ids_input);
#endif
}

// --verbose: the model, the load and which kernels its Gemms run through.
void report_load(std::FILE* log, const CliArgs& args, const Runtime& runtime, int threads) {
  const char* precision = args.precision == Precision::kFp16 ? "fp16"
                          : args.precision == Precision::kAuto ? "auto" : "fp32";
  std::fprintf(log, "model: %s, %d threads, precision %s, embeddings from %s\n",
               runtime.config().folder.c_str(), threads, precision, runtime.embedding_source().c_str());
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
}

// One batch request answered into result (its line and id already set); throws gsurg::Error on bad input.
void answer_request(const BatchRequest& req, const CliArgs& args, Runtime& runtime, const Tokenizer* tokenizer,
                    BatchResult& result) {
  const ModelConfig& cfg = runtime.config();
  if (!req.images.empty()) runtime.load_vision();  // checked against model.json before any preprocessing
  const std::vector<PatchInput> images = load_images(req.images, {}, runtime.family());
  const std::vector<int> ids =
      req.has_ids ? req.ids : text_prompt_ids(runtime, tokenizer, req.prompt, images, "a request's \"prompt\"",
                                                "a request's \"ids\"");
  GenerateOptions options;
  options.max_new_tokens = req.gen > 0 ? req.gen : args.gen;
  if (args.prefill_chunk >= 0) options.prefill_chunk = args.prefill_chunk;
  options.ignore_eos = args.ignore_eos;
  options.sampling = args.sampling;  // the same seed for every request: each is sampled as if run alone
  const GenerateResult g = runtime.generate(ids, images, options, [](int) {});
  const bool eos = !args.ignore_eos && !g.tokens.empty() && cfg.is_eos(g.tokens.back());
  result.prompt_tokens = g.prompt_tokens;
  result.prompt_ids = ids;
  result.tokens = g.tokens;
  result.stop = eos ? "eos" : g.hit_context_limit ? "context" : "length";
#if GSURG_HAVE_TOKENIZER
  if (tokenizer != nullptr) {
    const std::vector<int> answer(g.tokens.begin(), g.tokens.end() - (eos ? 1 : 0));
    result.text = tokenizer->decode(answer);
    result.has_text = true;
  }
#endif
}

}  // namespace

int run_batch(const CliArgs& args, std::FILE* out, std::FILE* log) {
  const double t_start = now_seconds();
  BatchLines lines(args.batch);  // an unreadable file is refused before the model loads
  const int threads = thread_count(args);
  huge_pages::set_enabled(args.huge_pages);
  Runtime runtime(args.model, threads, !args.no_mmap, args.precision, args.int4_activations_int8);
#if GSURG_HAVE_TOKENIZER
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(runtime.config());
  const Tokenizer* tokenizer = tok.get();
#else
  const Tokenizer* tokenizer = nullptr;
#endif
  if (args.verbose) report_load(log, args, runtime, threads);
  int requests = 0, failed = 0;
  long long new_tokens = 0;
  std::string text;
  bool too_long = false;
  while (lines.next(text, too_long)) {
    BatchRequest req;
    req.line = lines.line();
    BatchResult result;
    result.line = req.line;
    result.print_prompt_ids = args.print_ids;
    std::string error;
    try {
      if (too_long) throw Error("the line is longer than " + std::to_string(kMaxBatchLine) + " bytes");
      parse_batch_request(text, lines.folder(), req);
      answer_request(req, args, runtime, tokenizer, result);
    } catch (const Error& err) {
      error = err.what();
    } catch (const std::bad_alloc&) {
      error = "out of memory";
    }
    ++requests;
    if (!error.empty()) {  // nothing of the request's answer, only its line, id and the error
      ++failed;
      result = BatchResult();
      result.line = req.line;
      result.print_prompt_ids = args.print_ids;
      result.error = "line " + std::to_string(req.line) + ": " + error;
      std::fprintf(log, "%s: %s line %d: error: %s\n", program_name(),
                   args.batch == "-" ? "stdin" : args.batch.c_str(), req.line, error.c_str());
    }
    result.id = req.id;  // set as soon as the line was an object with an id
    new_tokens += static_cast<long long>(result.tokens.size());
    const std::string json = batch_result_json(result);
    std::fwrite(json.data(), 1, json.size(), out);
    std::fputc('\n', out);
    std::fflush(out);
  }
  if (args.verbose)
    std::fprintf(log, "batch: %d requests (%d failed), %lld new tokens, total %.3f s\n", requests, failed,
                 new_tokens, now_seconds() - t_start);
  return failed == 0 ? 0 : 1;
}

int run(const CliArgs& args, std::FILE* out, std::FILE* log) {
  if (args.has_batch) return run_batch(args, out, log);
  const double t_start = now_seconds();
  const int threads = thread_count(args);
  if (args.has_prompt && args.prompt.find_first_not_of(" \t\r\n") == std::string::npos)
    throw Error("the prompt is empty");
  // --prompt-file is read, and refused, before anything loads; the text then goes where --prompt's would
  const std::string prompt = args.has_prompt_file ? read_prompt_file(args.prompt_file) : args.prompt;
  const char* const text_flag = args.has_prompt_file ? "--prompt-file" : "--prompt";
  if (args.has_ids && args.ids.empty()) throw Error("--ids is empty");
  huge_pages::set_enabled(args.huge_pages);
  Runtime runtime(args.model, threads, !args.no_mmap, args.precision, args.int4_activations_int8);
  const ModelConfig& cfg = runtime.config();
#if GSURG_HAVE_TOKENIZER
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(cfg);
  const Tokenizer* tokenizer = tok.get();
#else
  const Tokenizer* tokenizer = nullptr;
#endif
  // The vision nets are checked against model.json before any image is preprocessed with its settings.
  if (!args.images.empty() || !args.pixel_files.empty()) runtime.load_vision();
  double t0 = now_seconds();
  const std::vector<PatchInput> images = load_images(args.images, args.pixel_files, runtime.family());
  const double preprocess_seconds = now_seconds() - t0;

  const std::vector<int> ids =
      args.has_ids ? args.ids : text_prompt_ids(runtime, tokenizer, prompt, images, text_flag, "--ids");

  GenerateOptions options;
  options.max_new_tokens = args.gen;
  if (args.prefill_chunk >= 0) options.prefill_chunk = args.prefill_chunk;
  options.ignore_eos = args.ignore_eos;
  options.forced = args.force_ids;
  options.sampling = args.sampling;
#if GSURG_HAVE_TOKENIZER
  std::unique_ptr<StreamDecoder> stream(tok ? new StreamDecoder(*tok) : nullptr);
#endif
  auto on_token = [&](int id) {
    if (!args.ignore_eos && args.force_ids.empty() && cfg.is_eos(id)) return;  // EOS ends the answer
#if GSURG_HAVE_TOKENIZER
    const std::string text = stream ? stream->push(id) : " " + std::to_string(id);
#else
    const std::string text = " " + std::to_string(id);
#endif
    std::fwrite(text.data(), 1, text.size(), out);
    std::fflush(out);
  };
  GenerateResult result = runtime.generate(ids, images, options, on_token);
#if GSURG_HAVE_TOKENIZER
  if (stream) {
    const std::string tail = stream->finish();
    std::fwrite(tail.data(), 1, tail.size(), out);
  }
#endif
  std::fputc('\n', out);
  if (args.print_ids) {
    const std::string prompt_json = ids_json(ids), json = ids_json(result.tokens);
    std::fprintf(out, "{\"prompt_tokens\": %d, \"prompt_ids\": %s, \"tokens\": %s}\n", result.prompt_tokens,
                 prompt_json.c_str(), json.c_str());
  }
  std::fflush(out);
  if (result.hit_context_limit)  // fewer tokens than --gen asked for, and not because of EOS: say why
    std::fprintf(log, "%s: generation stopped at the context limit: %d prompt + %d new tokens = %lld positions "
                 "(max_positions / model_max_length), short of --gen %d\n", program_name(), result.prompt_tokens,
                 static_cast<int>(result.tokens.size()), static_cast<long long>(cfg.max_positions), args.gen);
  if (args.verbose) {
    const int n = static_cast<int>(result.tokens.size());
    const double prefill_s = result.prefill_seconds, decode_s = result.decode_seconds;
    const double prefill_rate = prefill_s > 0 ? result.prompt_tokens / prefill_s : 0.0;
    const double decode_rate = decode_s > 0 ? result.decode_steps / decode_s : 0.0;
    report_load(log, args, runtime, threads);
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
