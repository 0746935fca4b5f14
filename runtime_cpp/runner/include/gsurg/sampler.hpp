// Picks the next token from one row of logits, in HF generate's order: repetition penalty over every id
// seen so far (prompt and generated: a positive logit is divided by the penalty, a negative one
// multiplied), then greedy argmax (temperature 0: the first maximal index, as torch/numpy argmax), or
// sampling: logits / temperature, keep the top-k (ties broken by the lower id), keep the smallest set of
// most likely tokens whose probability reaches top-p (at least one), softmax, draw. The draw uses
// std::mt19937_64 (fully specified by the standard) and 53-bit uniform doubles built by hand, so a seed
// gives the same tokens on every platform and compiler. Only ids below the logits' width are ever
// returned or touched.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace gsurg {

struct SamplingOptions {
  float temperature = 0.0f;         // 0: greedy
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float repetition_penalty = 1.0f;  // 1: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  // history: the ids the penalty applies to (prompt + generated so far). logits is modified in place.
  int next(std::vector<float>& logits, const std::vector<int>& history);
  bool greedy() const { return options_.temperature <= 0.0f; }

 private:
  double uniform();  // [0, 1)
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace gsurg
