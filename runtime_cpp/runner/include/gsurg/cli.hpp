// The program's command line (gsurg_run or a family's alias: the name main gives it, program_name()): parsing
// (strict: unknown flags, missing values and malformed numbers are gsurg::Error naming the flag) and run(),
// which loads the model and its family, builds the prompt (the family's chat template + the tokenizer,
// images through the family's preprocessing), generates and streams the text to stdout.
// Debug/test inputs: --ids (prompt token ids instead of --prompt) and --pixel-values (a preprocessed
// image dump instead of --image); --print-ids prints {"prompt_tokens": N, "prompt_ids": [...], "tokens":
// [...]} as the last stdout line (the prompt's ids as the family built them, then the new tokens);
// --ignore-eos generates exactly --gen tokens; --no-mmap reads embedding rows without a map; --huge-pages
// advises transparent huge pages for large buffers (huge_pages.hpp).
// --batch FILE answers one request per line of a JSON Lines file with the model loaded once (batch.hpp).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "gsurg/model_config.hpp"
#include "gsurg/sampler.hpp"

namespace gsurg {

// The most threads --threads takes: far past any CPU the runtime meets, and below what makes the OpenMP
// runtime give up (--threads 1024 ended in libgomp's abort with no message, or hung).
constexpr int kMaxThreads = 256;

struct CliArgs {
  std::string model;
  std::string prompt;
  bool has_prompt = false;
  std::string prompt_file;  // --prompt-file FILE ("-": stdin): the prompt's text, read by run()
  bool has_prompt_file = false;
  std::vector<int> ids;
  bool has_ids = false;
  std::vector<std::string> images;
  std::vector<std::string> pixel_files;
  int gen = 256;
  int prefill_chunk = -1;  // --prefill-chunk N: GenerateOptions::prefill_chunk (0: whole); -1: its default
  int threads = 0;  // 0: ncnn's count of physical big cores; else 1 to kMaxThreads
  Precision precision = Precision::kFp32;
  bool int4_activations_int8 = false;  // --int4-activations int8 (NetFiles::quantize_int4_input)
  SamplingOptions sampling;
  bool ignore_eos = false;
  std::vector<int> force_ids;  // --force-ids: teacher forcing (GenerateOptions::forced)
  bool print_ids = false;
  bool verbose = false;
  bool no_mmap = false;
  bool huge_pages = false;  // --huge-pages: huge_pages::set_enabled(true) before loading
  std::string batch;        // --batch FILE ("-": stdin): the requests, instead of --prompt / --ids / --image
  bool has_batch = false;
  bool gen_given = false;   // --gen on the command line (a batch request's default)
  bool help = false;
};

CliArgs parse_args(const std::vector<std::string>& argv);  // argv[0] is the program
// --prompt-file's text: the file's bytes (stdin's for "-"), a UTF-8 byte order mark and one final line end
// ("\n" or "\r\n") dropped. Throws gsurg::Error naming the file when it cannot be read, is not UTF-8 or
// holds no prompt (nothing but white space).
std::string read_prompt_file(const std::string& path);
std::string usage();  // with program_name()
// Runs one generation (or, with --batch, run_batch); returns the process exit code. Throws gsurg::Error on
// bad input.
int run(const CliArgs& args, std::FILE* out, std::FILE* log);
// --batch: one result line on out per request line of args.batch, the model loaded once (batch.hpp); returns
// 0 when every request was answered, 1 when some got an error result. Throws gsurg::Error when the batch
// cannot start (an unreadable file, the model).
int run_batch(const CliArgs& args, std::FILE* out, std::FILE* log);

}  // namespace gsurg
