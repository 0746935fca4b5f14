// The seams between the runner's core and a family, on the converted tiny Penguin-VL model (argv[1]):
// - the registry knows penguin_vl at model.json version 2 and nothing else, and ModelConfig::load makes
//   that family from model.json;
// - the decoder uses the cos/sin tables the step is given: the family's positions give exactly the
//   core's 1-D tables (bit-equal hidden rows), while tables of other positions change the output, so a
//   family's own counter (MRoPE) reaches the net;
// - a step whose tables do not cover its rows, or whose extra input is not one the family declared, is
//   refused before the net runs.
// Exit 0 when every check holds, 1 with a line per failed check.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gsurg/decoder.hpp"
#include "gsurg/embeddings.hpp"
#include "gsurg/family.hpp"
#include "gsurg/family_registry.hpp"
#include "gsurg/model_config.hpp"
#include "gsurg/rope.hpp"

namespace {

int g_failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++g_failures;
}

// The last hidden row of one prefill of ids with the given tables.
std::vector<float> prefill(const gsurg::Decoder& dec, const gsurg::Embeddings& emb, const std::vector<int>& ids,
                           const gsurg::RopeTables& rope) {
  gsurg::KVSession session(dec, static_cast<int>(ids.size()));
  gsurg::StepInputs in;
  in.rope = rope;
  return session.step(emb.rows(ids), static_cast<int>(ids.size()), in);
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) m = std::fmax(m, std::fabs(a[i] - b[i]));
  return m;
}

template <typename Fn>
bool throws_logic_error(Fn fn) {
  try {
    fn();
  } catch (const std::logic_error&) {
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gsurg_family_seams MODEL_DIR\n");
    return 2;
  }
  try {
    const gsurg::FamilyEntry* penguin = gsurg::find_family("penguin_vl");
    expect(penguin != nullptr && penguin->version == 2, "the registry has penguin_vl version 2");
    expect(gsurg::find_family("llama") == nullptr, "the registry has no family none registered (llama)");

    std::unique_ptr<gsurg::Family> family;
    const gsurg::ModelConfig cfg = gsurg::ModelConfig::load(argv[1], family);
    expect(family && family->name() == "penguin_vl" && cfg.family == "penguin_vl",
           "ModelConfig::load makes the family model.json names");
    const gsurg::Embeddings emb(cfg, 1);
    const gsurg::Decoder dec(cfg, 1, family->decoder_inputs());

    std::vector<int> ids;
    for (int id = 1; static_cast<int>(ids.size()) < 6; ++id) {
      if (id != family->placeholder_id()) ids.push_back(id);
    }
    const int n = static_cast<int>(ids.size());
    const gsurg::DecoderSettings& d = cfg.decoder;
    const std::unique_ptr<gsurg::Positions> positions = family->positions(cfg, ids, {});
    const std::vector<float> by_family = prefill(dec, emb, ids, positions->tables(0, n));
    const std::vector<float> by_core =
        prefill(dec, emb, ids, gsurg::text_rope_tables(0, n, d.rope_head_dim, d.rope_theta, d.rope_full_width));
    expect(max_abs_diff(by_family, by_core) == 0.0f, "penguin_vl's positions are the core's 1-D tables");
    // Every token at position 0: no rotation, so attention no longer sees the order.
    gsurg::RopeTables flat = gsurg::text_rope_tables(0, n, d.rope_head_dim, d.rope_theta, d.rope_full_width);
    const gsurg::RopeTables first = gsurg::text_rope_tables(0, 1, d.rope_head_dim, d.rope_theta, d.rope_full_width);
    for (int r = 0; r < n; ++r) {
      std::copy(first.cos.begin(), first.cos.end(), flat.cos.begin() + static_cast<long>(r) * flat.width);
      std::copy(first.sin.begin(), first.sin.end(), flat.sin.begin() + static_cast<long>(r) * flat.width);
    }
    const float moved = max_abs_diff(prefill(dec, emb, ids, flat), by_core);
    expect(moved > 1e-4f, "other tables change the decoder's output (max |diff| " + std::to_string(moved) + ")");

    expect(throws_logic_error([&] {
             prefill(dec, emb, ids, gsurg::text_rope_tables(0, n - 1, d.rope_head_dim, d.rope_theta,
                                                          d.rope_full_width));
           }),
           "tables of fewer rows than the step are refused");
    expect(throws_logic_error([&] {
             gsurg::KVSession session(dec, n);
             gsurg::StepInputs in;
             in.rope = positions->tables(0, n);
             in.extra.push_back(gsurg::NetInput{"deepstack0", n, cfg.hidden_size,
                                              std::vector<float>(static_cast<size_t>(n) * cfg.hidden_size)});
             session.step(emb.rows(ids), n, in);
           }),
           "an extra input the family did not declare is refused");
  } catch (const std::exception& err) {
    std::printf("FAILED: %s\n", err.what());
    return 1;
  }
  return g_failures == 0 ? 0 : 1;
}
