// Strict parsing of the program's flags (see cli.hpp).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "gsurg/cli.hpp"
#include "gsurg/error.hpp"
#include "gsurg/family_registry.hpp"
#include "gsurg/files.hpp"
#include "gsurg/generate.hpp"

#ifdef _WIN32
#include <fcntl.h>
#include <io.h>
#endif

namespace gsurg {

namespace {

long long parse_integer(const std::string& flag, const std::string& text, long long lo, long long hi) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end == nullptr || *end != '\0' || errno != 0 || v < lo || v > hi)
    throw Error(flag + ": \"" + text + "\" is not an integer in [" + std::to_string(lo) + ", "
        + std::to_string(hi) + "]");
  return v;
}

float parse_float(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0' || errno != 0 || !std::isfinite(v))
    throw Error(flag + ": \"" + text + "\" is not a number");
  return static_cast<float>(v);
}

std::vector<int> parse_ids(const std::string& flag, const std::string& text) {
  std::vector<int> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    ids.push_back(static_cast<int>(parse_integer(flag, item, 0, 2147483647LL)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

// The offset of the first byte of text that does not belong to well-formed UTF-8 (no overlong forms, no
// surrogates, nothing past U+10FFFF), or npos when it is all UTF-8.
size_t first_bad_utf8(const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = s[i];
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {  // E0: no overlong form; ED: no surrogate
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {  // F0: no overlong form; F4: nothing past U+10FFFF
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (len > n - i) return i;
    for (size_t k = 1; k < len; ++k) {
      const unsigned b = s[i + k];
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return i;
    }
    i += len;
  }
  return std::string::npos;
}

// Standard input's bytes, at most max_bytes of them.
std::string read_stdin(uint64_t max_bytes) {
#ifdef _WIN32
  _setmode(_fileno(stdin), _O_BINARY);  // the bytes as sent: no \r\n folding, no end at ^Z
#endif
  std::string text;
  char buffer[1 << 16];
  size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, stdin)) > 0) {
    if (text.size() + got > max_bytes)
      throw Error("stdin: more than " + std::to_string(max_bytes >> 20) + " MiB (--prompt-file -)");
    text.append(buffer, got);
  }
  if (std::ferror(stdin)) throw Error("stdin: read error (--prompt-file -)");
  return text;
}

}  // namespace

std::string read_prompt_file(const std::string& path) {
  const std::string name = path == "-" ? std::string("stdin") : path;
  std::string text;
  if (path == "-") {
    text = read_stdin(kMaxWholeFile);
  } else {
    const std::string problem = file_problem(path);  // missing, a folder, a FIFO: said the same on every OS
    if (!problem.empty()) throw Error(path + ": " + problem + " (--prompt-file)");
    try {
      text = read_file(path);  // its errors name the path: too large, unreadable
    } catch (const Error& err) {
      throw Error(std::string(err.what()) + " (--prompt-file)");
    }
  }
  const size_t bom = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  text.erase(0, bom);
  const size_t bad = first_bad_utf8(text);
  if (bad != std::string::npos) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(text[bad])));
    throw Error(name + ": not UTF-8 text (byte " + std::to_string(bom + bad) + " is " + byte
        + ") (--prompt-file)");
  }
  if (!text.empty() && text.back() == '\n') {
    text.pop_back();
    if (!text.empty() && text.back() == '\r') text.pop_back();
  }
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw Error(name + ": the prompt is empty (--prompt-file)");
  return text;
}

std::string usage() {
  const std::string name = program_name();
  const std::string pad(name.size(), ' ');
  // A family's alias is named like the rule file its models come from: <family>_run <- rules/<family>.yaml;
  // any other name (gsurg_run) runs every registered family: FAMILY, one of them.
  const size_t run = name.rfind("_run");
  const std::string stem = (run != std::string::npos && run + 4 == name.size() ? name.substr(0, run) : name);
  std::string rules = "FAMILY";
  std::string listed;
  for (const FamilyEntry& f : families()) {
    if (stem == f.name) rules = stem;
    listed += std::string(listed.empty() ? "" : ", ") + f.name;
  }
  return "usage: " + name + " --model DIR [--image IMG]... (--prompt TEXT | --prompt-file FILE | --ids 1,2,3)"
         " [--gen N]\n"
         "       " + name + " --model DIR --batch FILE [--gen N] [--print-ids] ...\n"
         "       " + pad + " [--threads N] [--precision fp32|fp16|auto] [--temperature T] [--top-k K]\n"
         "       " + pad + " [--top-p P] [--int4-activations fp32|int8]\n"
         "       " + pad + " [--repetition-penalty R] [--seed S] [--verbose]\n"
         "  --model DIR            the output of `gsurg apply rules/" + rules + ".yaml`" +
         (rules == "FAMILY" ? "\n                         (FAMILY: " + listed + ")" : std::string()) + "\n"
         "  --image IMG            a PNG or JPEG image (repeatable; placed before the text)\n"
         "  --prompt TEXT          the user message (UTF-8); without --image the model answers text-only\n"
         "  --prompt-file FILE     the user message read from a UTF-8 file (\"-\": stdin), for prompts too\n"
         "                         long for one argument; one final line end is dropped\n"
         "  --gen N                at most N new tokens (default 256); stops earlier at EOS or when the\n"
         "                         model's context (model.json max_positions) is full, saying so on stderr\n"
         "  --prefill-chunk N      prompt rows per decoder run (default " + std::to_string(kDefaultPrefillChunk)
         + "; 0: the whole prompt at once):\n"
         "                         attention memory grows with N x the prompt length, not its square\n"
         "  --batch FILE           answer every request of a JSON Lines file (\"-\": stdin), one JSON line\n"
         "                         out per request line, with the model loaded once (runner/README.md)\n"
         "  --threads N            CPU threads, 1 to " + std::to_string(kMaxThreads)
         + " (default: physical big cores)\n"
         "  --precision P          fp32 (default: exact), fp16 (fp16 storage, packing and arithmetic\n"
         "                         where the CPU has them, except in calibrated layers) or auto (ncnn's\n"
         "                         defaults); int8/int4 weights run their int kernels under all three\n"
         "  --int4-activations A   fp32 (default: 4-bit Gemms compute as ncnn's loop, bit for bit) or int8\n"
         "                         (their input rounded to 8 bits per block, integer dot products: faster,\n"
         "                         not ncnn's arithmetic; taken where the CPU has AVX2, AVX-512 VNNI or NEON)\n"
         "  --temperature T        0 (default) = greedy; > 0 samples\n"
         "  --top-k K / --top-p P  sampling filters (0 / 1 = off)\n"
         "  --repetition-penalty R penalise ids already in the prompt or output (1 = off)\n"
         "  --seed S               sampling seed (default 0); the same seed gives the same tokens\n"
         "  --verbose              per-stage times on stderr\n"
         "debug/test options:\n"
         "  --ids 1,2,3            prompt token ids (the full chat prompt) instead of --prompt\n"
         "  --pixel-values FILE    a preprocessed image dump (PVLPIX01) instead of --image\n"
         "  --print-ids            print {\"prompt_tokens\": N, \"prompt_ids\": [...], \"tokens\": [...]} as the last\n"
         "                         stdout line\n"
         "  --ignore-eos           do not stop at EOS: generate exactly --gen tokens\n"
         "  --force-ids 4,5,6      teacher forcing: the model picks N tokens (printed), but after pick i\n"
         "                         the i-th id is fed back instead; ignores EOS, at most --gen picks\n"
         "  --no-mmap              read the weights (.bin files, tied embedding rows) with file reads\n"
         "                         instead of memory maps\n"
         "  --huge-pages           advise transparent huge pages for large buffers (Linux): ~8x fewer\n"
         "                         page faults while loading; slower on VMs that report free memory\n";
}

CliArgs parse_args(const std::vector<std::string>& argv) {
  CliArgs a;
  for (size_t i = 1; i < argv.size(); ++i) {
    std::string flag = argv[i];
    std::string inline_value;  // --flag=value
    bool has_inline = false;
    const size_t eq = flag.find('=');
    if (flag.compare(0, 2, "--") == 0 && eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag.resize(eq);
      has_inline = true;
    }
    auto value = [&]() -> const std::string& {
      if (has_inline) {
        has_inline = false;
        return inline_value;
      }
      if (i + 1 >= argv.size()) throw Error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      a.help = true;
    } else if (flag == "--model") {
      a.model = value();
    } else if (flag == "--image") {
      a.images.push_back(value());
    } else if (flag == "--prompt") {
      a.prompt = value();
      a.has_prompt = true;
    } else if (flag == "--prompt-file") {
      a.prompt_file = value();
      a.has_prompt_file = true;
    } else if (flag == "--ids") {
      a.ids = parse_ids(flag, value());
      a.has_ids = true;
    } else if (flag == "--pixel-values") {
      a.pixel_files.push_back(value());
    } else if (flag == "--gen") {
      a.gen = static_cast<int>(parse_integer(flag, value(), 1, 1 << 30));
      a.gen_given = true;
    } else if (flag == "--prefill-chunk") {
      a.prefill_chunk = static_cast<int>(parse_integer(flag, value(), 0, 1 << 30));
    } else if (flag == "--batch") {
      a.batch = value();
      a.has_batch = true;
    } else if (flag == "--threads") {
      a.threads = static_cast<int>(parse_integer(flag, value(), 1, kMaxThreads));
    } else if (flag == "--int4-activations") {
      const std::string& v = value();
      if (v == "fp32") a.int4_activations_int8 = false;
      else if (v == "int8") a.int4_activations_int8 = true;
      else throw Error("--int4-activations must be fp32 or int8, not \"" + v + "\"");
    } else if (flag == "--precision") {
      const std::string& p = value();
      if (p == "fp32") a.precision = Precision::kFp32;
      else if (p == "fp16") a.precision = Precision::kFp16;
      else if (p == "auto") a.precision = Precision::kAuto;
      else throw Error("--precision must be fp32, fp16 or auto, not \"" + p + "\"");
    } else if (flag == "--temperature") {
      a.sampling.temperature = parse_float(flag, value());
    } else if (flag == "--top-k") {
      a.sampling.top_k = static_cast<int>(parse_integer(flag, value(), 0, 1 << 30));
    } else if (flag == "--top-p") {
      a.sampling.top_p = parse_float(flag, value());
    } else if (flag == "--repetition-penalty") {
      a.sampling.repetition_penalty = parse_float(flag, value());
    } else if (flag == "--seed") {
      a.sampling.seed = static_cast<uint64_t>(parse_integer(flag, value(), 0, 9223372036854775807LL));
    } else if (flag == "--force-ids") {
      a.force_ids = parse_ids(flag, value());
    } else if (flag == "--ignore-eos") {
      a.ignore_eos = true;
    } else if (flag == "--print-ids") {
      a.print_ids = true;
    } else if (flag == "--no-mmap") {
      a.no_mmap = true;
    } else if (flag == "--huge-pages") {
      a.huge_pages = true;
    } else if (flag == "--verbose") {
      a.verbose = true;
    } else {
      throw Error("unknown argument \"" + flag + "\" (see --help)");
    }
    if (has_inline) throw Error(flag + " takes no value");
  }
  if (a.help) return a;
  if (a.model.empty()) throw Error("--model DIR is required");
  if (a.has_batch) {
    if (a.batch.empty()) throw Error("--batch: the file name is empty");
    const char* single = a.has_prompt ? "--prompt" : a.has_prompt_file ? "--prompt-file" : a.has_ids ? "--ids"
                         : !a.images.empty() ? "--image"
                         : !a.pixel_files.empty() ? "--pixel-values" : !a.force_ids.empty() ? "--force-ids"
                         : nullptr;
    if (single != nullptr)
      throw Error(std::string(single) + " cannot go with --batch (each request line gives its own input)");
    return a;
  }
  if (int(a.has_prompt) + int(a.has_prompt_file) + int(a.has_ids) != 1)
    throw Error("give exactly one of --prompt TEXT, --prompt-file FILE and --ids 1,2,3");
  if (a.has_prompt_file && a.prompt_file.empty()) throw Error("--prompt-file: the file name is empty");
  if (!a.images.empty()
      && !a.pixel_files.empty()) throw Error("give images with --image or --pixel-values, not both");
  return a;
}

}  // namespace gsurg
