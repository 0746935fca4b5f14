// Vision -> fused embeddings -> prefill -> decode loop (see generate.hpp).
#include "gsurg/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

#ifdef __linux__
#include <sys/resource.h>
#endif

#include "gsurg/error.hpp"
#include "gsurg/net_checks.hpp"

namespace gsurg {

namespace {
const int kMaxReservedNewTokens = 8192;  // a huge --gen must not reserve a huge cache up front
// The prefill estimate is raised by this before it is compared with the memory available: measured on the
// tiny model under ulimit -v 4000000 (3.8 GiB left after the load), 18,000 tokens (estimate 3.7 GiB) ran and
// 18,300 (3.8 GiB) failed inside ncnn, whose pool allocator then reports the failed allocation as a leak
// ("(nil) still in use", ncnn 1.0.20261020 src/allocator.cpp PoolAllocator::fastMalloc keeps the null it got).
const double kEstimateMargin = 1.25;
}  // namespace

double prefill_bytes_estimate(const ModelConfig& cfg, int64_t length, int64_t chunk) {
  const double heads = std::max(1, cfg.hidden_size / std::max(1, cfg.decoder.rope_head_dim));
  const double l = static_cast<double>(length);
  const double c = chunk > 0 && chunk < length ? static_cast<double>(chunk) : l;
  const double hidden = cfg.hidden_size;
  return 4.0 * c * l * (heads + 1) + 4.0 * l * hidden * (2.0 * cfg.num_layers + 1) + 16.0 * c * hidden;
}

namespace {

#ifdef __linux__
// The first number after `key` on a line of the text file `path` that starts with it; -1 when none.
long long number_after(const char* path, const char* key) {
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return -1;
  char line[512];
  long long value = -1;
  const size_t n = std::strlen(key);
  while (value < 0 && std::fgets(line, sizeof line, f) != nullptr)
    if (std::strncmp(line, key, n) == 0 && std::sscanf(line + n, "%lld", &value) != 1) value = -1;
  std::fclose(f);
  return value;
}

// This process's cgroup v2 folder (the "0::" line of /proc/self/cgroup), or "" when there is none.
std::string cgroup_folder() {
  std::FILE* f = std::fopen("/proc/self/cgroup", "r");
  if (f == nullptr) return "";
  char line[1024];
  std::string folder;
  while (folder.empty() && std::fgets(line, sizeof line, f) != nullptr)
    if (std::strncmp(line, "0::", 3) == 0) folder = std::string("/sys/fs/cgroup") + (line + 3);
  std::fclose(f);
  while (!folder.empty() && (folder.back() == '\n' || folder.back() == '/')) folder.pop_back();
  return folder;
}
#endif

// Rows start..start+rows-1 of a prefill input that holds one row per prompt token.
NetInput row_range(const NetInput& in, int start, int rows, int length) {
  if (in.rows != length || in.data.size() != static_cast<size_t>(in.rows) * static_cast<size_t>(in.cols))
    throw std::logic_error("prefill input \"" + in.blob + "\" does not hold one row per prompt token");
  NetInput out{in.blob, rows, in.cols, {}};
  const auto first = in.data.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(start) * in.cols);
  out.data.assign(first, first + static_cast<std::ptrdiff_t>(static_cast<size_t>(rows) * in.cols));
  return out;
}

}  // namespace

MemoryRoom available_memory() {
  MemoryRoom room;
#ifdef __linux__
  auto offer = [&room](long long bytes, const char* source) {
    if (bytes < 0) return;
    const uint64_t b = static_cast<uint64_t>(bytes);
    if (room.source.empty() || b < room.bytes) room = {b, source};
  };
  const long long available_kib = number_after("/proc/meminfo", "MemAvailable:");
  if (available_kib >= 0) offer(available_kib * 1024, "MemAvailable, /proc/meminfo");
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const long long size_kib = number_after("/proc/self/status", "VmSize:");
    const long long cap = static_cast<long long>(limit.rlim_cur);
    if (size_kib >= 0) offer(std::max(0LL, cap - size_kib * 1024), "the address-space limit, ulimit -v");
  }
  const std::string folder = cgroup_folder();
  if (!folder.empty()) {
    const long long cap = number_after((folder + "/memory.max").c_str(), "");  // "max": no number, no limit
    const long long used = number_after((folder + "/memory.current").c_str(), "");
    if (cap >= 0 && used >= 0) offer(std::max(0LL, cap - used), "the cgroup's memory.max");
  }
#endif
  return room;
}

uint64_t available_memory_bytes() { return available_memory().bytes; }

void check_prefill_memory(const ModelConfig& cfg, int64_t length, int64_t chunk) {
  const MemoryRoom room = available_memory();
  if (room.source.empty()) return;  // unknown: not Linux, or nothing readable
  const double need = prefill_bytes_estimate(cfg, length, chunk);
  if (need * kEstimateMargin <= static_cast<double>(room.bytes)) return;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  char text[384];
  std::snprintf(text, sizeof text,
                "the prompt has %lld tokens: its prefill would need about %.1f GiB (attention grows with the "
                "prompt length times --prefill-chunk; %.1f GiB with the estimate's %.0f%% margin), more than "
                "the %.1f GiB of memory available (%s)",
                static_cast<long long>(length), need / gib, need * kEstimateMargin / gib,
                (kEstimateMargin - 1) * 100, static_cast<double>(room.bytes) / gib, room.source.c_str());
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
  if (options.max_new_tokens < 1) throw Error("--gen must be at least 1");
  if (options.prefill_chunk < 0) throw Error("--prefill-chunk must be 0 (the whole prompt) or more");
  const int chunk = options.prefill_chunk > 0 ? std::min(options.prefill_chunk, length) : length;
  check_prefill_memory(cfg_, length, chunk);  // before the prompt's rows, mask and attention are allocated
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
  std::vector<float> last;
  if (chunk == length) {
    prefill.rope = positions->tables(0, length);
    last = session.step(embeds, length, prefill);
  } else {  // chunk by chunk: each run's queries attend to the cache of the runs before and to themselves
    const size_t width = static_cast<size_t>(cfg_.hidden_size);
    for (int start = 0; start < length; start += chunk) {
      const int rows = std::min(chunk, length - start);
      StepInputs part;
      part.rope = positions->tables(start, rows);
      for (const NetInput& in : prefill.extra) part.extra.push_back(row_range(in, start, rows, length));
      const std::vector<float> hidden(embeds.begin() + static_cast<std::ptrdiff_t>(start * width),
                                      embeds.begin() + static_cast<std::ptrdiff_t>((start + rows) * width));
      last = session.step(hidden, rows, part);
    }
  }
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
