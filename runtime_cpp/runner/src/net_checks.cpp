// model.json against the nets' own shapes (see net_checks.hpp).
#include "gsurg/net_checks.hpp"

#include <algorithm>

#include "gsurg/error.hpp"

namespace gsurg {

std::string net_ref(const LoadedNet& net) { return "nets." + net.files().name; }

namespace {

std::string where(const LoadedNet& net, const Width& w) {
  std::string file = net.files().param;
  const size_t slash = file.find_last_of("/\\");
  if (slash != std::string::npos) file = file.substr(slash + 1);
  return "(" + file + ": " + w.layer + ")";
}

}  // namespace

void check_claim(const ModelConfig& cfg, const std::string& key, long long value, const std::string& meaning,
                 const LoadedNet& net, const Width& has, std::string what, long long expected) {
  if (has.value == 0 || has.value == (expected < 0 ? value : expected)) return;
  what.replace(what.find('%'), 1, std::to_string(has.value));
  throw Error(cfg.json_path + ": entry \"" + key + "\" is " + std::to_string(value) + meaning + ", but " +
              net_ref(net) + " " + what + " " + where(net, has));
}

void check_chain(const LoadedNet& from, const std::string& out, const LoadedNet& to, const std::string& in) {
  const Width made = from.graph().output_width(out), taken = to.graph().input_width(in);
  if (made.value == 0 || taken.value == 0 || made.value == taken.value) return;
  throw Error(net_ref(from) + " output \"" + out + "\" has rows of " + std::to_string(made.value) + " " +
              where(from, made) + ", but " + net_ref(to) + " input \"" + in + "\" takes " +
              std::to_string(taken.value) + " " + where(to, taken));
}

void check_fed(const LoadedNet& net, const std::vector<std::string>& blobs) {
  for (const auto& blob : net.graph().input_blobs()) {
    if (std::find(blobs.begin(), blobs.end(), blob) == blobs.end())
      throw Error(net.files().param + ": input blob \"" + blob +
                  "\" is not one the runtime feeds (model.json " + net_ref(net) + " and its settings name " +
                  std::to_string(blobs.size()) + ")");
  }
}

void check_layer_count(const ModelConfig& cfg, const std::string& key, int value, const LoadedNet& net) {
  const int n = net.graph().count("SDPA");
  if (n == 0 || n == value) return;
  throw Error(cfg.json_path + ": entry \"" + key + "\" is " + std::to_string(value) + ", but " +
              net_ref(net) + " has " + std::to_string(n) + " attention (SDPA) layers");
}

void check_llm_nets(const ModelConfig& cfg, const LoadedNet& decoder, const LoadedNet& lm_head,
                    const LoadedNet* embed, const std::vector<std::string>& extra_inputs) {
  const DecoderSettings& d = cfg.decoder;
  std::vector<std::string> inputs = {d.hidden, d.mask, d.cos, d.sin};
  inputs.insert(inputs.end(), d.cache_inputs.begin(), d.cache_inputs.end());
  inputs.insert(inputs.end(), extra_inputs.begin(), extra_inputs.end());
  check_fed(decoder, inputs);
  check_fed(lm_head, {lm_head.files().inputs[0]});
  const ParamGraph& dec = decoder.graph();
  check_claim(cfg, "hidden_size", cfg.hidden_size, "", decoder, dec.input_width(d.hidden),
              "takes rows of %");
  check_claim(cfg, "hidden_size", cfg.hidden_size, "", decoder, dec.output_width(d.output),
              "makes rows of %");
  for (const std::string* table : {&d.cos, &d.sin})
    check_claim(cfg, "decoder.rope.head_dim", d.rope_head_dim, "", decoder, dec.rope_width(*table),
                "rotates heads of %");
  check_layer_count(cfg, "num_layers", cfg.num_layers, decoder);
  const ParamGraph& head = lm_head.graph();
  check_claim(cfg, "hidden_size", cfg.hidden_size, "", lm_head, head.input_width(lm_head.files().inputs[0]),
              "takes rows of %");
  const Width logits = head.output_width(lm_head.files().outputs[0]);
  check_claim(cfg, "vocab_size", cfg.vocab_size, "", lm_head, logits, "makes rows of % logits");
  if (cfg.tied && cfg.embedding.rows > 0)
    check_claim(cfg, "embedding_matrix.shape", cfg.embedding.rows, " rows", lm_head, logits,
                "has % weight rows");
  if (embed != nullptr) {
    check_fed(*embed, {embed->files().inputs[0]});
    const Width rows = embed->graph().output_width(embed->files().outputs[0]);
    check_claim(cfg, "hidden_size", cfg.hidden_size, "", *embed, rows, "makes rows of %");
    for (const ParamLayer& l : embed->graph().layers()) {
      if (l.type != "Embed" || l.get(1, 0) < 1 || l.get(1, 0) >= cfg.vocab_size) continue;
      throw Error(cfg.json_path + ": entry \"vocab_size\" is " + std::to_string(cfg.vocab_size) + ", but " +
                  net_ref(*embed) + " has a table of " + std::to_string(l.get(1, 0)) + " rows (" + l.type +
                  " \"" + l.name + "\" input_dim)");
    }
  }
}

}  // namespace gsurg
