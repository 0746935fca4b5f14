// Greedy and sampled token choice (see sampler.hpp).
#include "gsurg/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gsurg/error.hpp"

namespace gsurg {

Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature))
    throw Error("--temperature must be a finite number >= 0");
  if (options.top_k < 0) throw Error("--top-k must be >= 0");
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) throw Error("--top-p must be in (0, 1]");
  if (!(options.repetition_penalty > 0.0f) || !std::isfinite(options.repetition_penalty))
    throw Error("--repetition-penalty must be a finite number > 0");
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0); }

int Sampler::next(std::vector<float>& logits, const std::vector<int>& history) {
  const int width = static_cast<int>(logits.size());
  if (width < 1) throw Error("the lm_head returned no logits");
  if (options_.repetition_penalty != 1.0f) {
    std::vector<char> seen(logits.size(), 0);
    for (int id : history) {
      if (id < 0 || id >= width || seen[static_cast<size_t>(id)]) continue;
      seen[static_cast<size_t>(id)] = 1;
      float& x = logits[static_cast<size_t>(id)];
      x = x < 0.0f ? x * options_.repetition_penalty : x / options_.repetition_penalty;
    }
  }
  if (greedy()) {
    return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates sorted by logit (descending), the lower id first on ties.
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  auto better = [&](int a, int b) {
    float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  size_t keep = order.size();
  if (options_.top_k > 0
      && static_cast<size_t>(options_.top_k) < keep) keep = static_cast<size_t>(options_.top_k);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), better);
  order.resize(keep);
  // Softmax of logits / temperature over the kept ids, in double.
  const double t = options_.temperature;
  const double top = static_cast<double>(logits[static_cast<size_t>(order[0])]) / t;
  std::vector<double> prob(keep);
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    prob[i] = std::exp(static_cast<double>(logits[static_cast<size_t>(order[i])]) / t - top);
    total += prob[i];
  }
  for (double& p : prob) p /= total;
  if (options_.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t n = 0;
    while (n < keep) {
      cumulative += prob[n++];
      if (cumulative >= options_.top_p) break;
    }
    prob.resize(n);
    order.resize(n);
    double sum = std::accumulate(prob.begin(), prob.end(), 0.0);
    for (double& p : prob) p /= sum;
  }
  double u = uniform();
  double acc = 0.0;
  for (size_t i = 0; i < prob.size(); ++i) {
    acc += prob[i];
    if (u < acc) return order[i];
  }
  return order[prob.size() - 1];
}

}  // namespace gsurg
