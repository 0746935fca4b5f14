// Decoder steps through SDPA's KV cache, and lm_head (see decoder.hpp).
#include "gsurg/decoder.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "gsurg/error.hpp"

namespace gsurg {

Decoder::Decoder(const ModelConfig& cfg, int threads, std::vector<std::string> extra_inputs)
    : cfg_(cfg), extra_inputs_(std::move(extra_inputs)) {
  decoder_.reset(new LoadedNet(cfg.net("decoder"), threads));
  lm_head_.reset(new LoadedNet(cfg.net("lm_head"), threads));
}

std::vector<float> Decoder::logits(const float* hidden_row) const {
  ncnn::Mat out = lm_head_->run(mat_2d(hidden_row, 1, cfg_.hidden_size));
  const std::string what = lm_head_->files().param + " output";
  if (out.dims == 1) out = out.reshape(out.w, 1);
  if (out.dims != 2 || out.h != 1 || out.w < 1) throw Error(what + ": expected one row of logits");
  return mat_rows(out, out.w, what);
}

KVSession::KVSession(const Decoder& decoder, int max_seqlen_hint)
    : decoder_(decoder), max_seqlen_hint_(max_seqlen_hint) {}

KVSession::~KVSession() {
  caches_.clear();  // the Mats go back to the allocator before it is destroyed
  allocator_.clear();
}

std::vector<float> KVSession::step(const std::vector<float>& hidden, int rows, const StepInputs& inputs) {
  const ModelConfig& cfg = decoder_.config();
  const DecoderSettings& d = cfg.decoder;
  const LoadedNet& net = decoder_.net();
  if (rows < 1 || hidden.size() != static_cast<size_t>(rows) * static_cast<size_t>(cfg.hidden_size))
    throw Error("decoder step: " + std::to_string(hidden.size()) + " values are not " + std::to_string(rows) +
                " rows of hidden_size " + std::to_string(cfg.hidden_size));
  const int start = position_;
  const RopeTables& rope = inputs.rope;
  if (rope.rows != rows || rope.width < 1 || rope.cos.size() != static_cast<size_t>(rows) * rope.width ||
      rope.sin.size() != rope.cos.size())
    throw std::logic_error("decoder step: RoPE tables of " + std::to_string(rope.rows) + " rows for " +
                           std::to_string(rows) + " tokens");
  std::vector<const NetInput*> extra(decoder_.extra_inputs().size(), nullptr);
  for (const NetInput& in : inputs.extra) {
    const std::vector<std::string>& names = decoder_.extra_inputs();
    const auto it = std::find(names.begin(), names.end(), in.blob);
    if (it == names.end() || in.data.size() != static_cast<size_t>(in.rows) * static_cast<size_t>(in.cols))
      throw std::logic_error("decoder step: extra input \"" + in.blob + "\" is not a declared [rows, cols]");
    extra[static_cast<size_t>(it - names.begin())] = &in;
  }
  std::vector<float> mask = causal_mask(start, rows, d.mask_value);
  std::vector<float> zeros;  // an absent extra input: [rows, hidden_size] of zeros

  std::vector<ncnn::Mat> grown(d.cache_inputs.size());
  ncnn::Mat out;
  {
    ncnn::Extractor ex = net.extractor();
    ex.set_kvcache_allocator(&allocator_);
    if (max_seqlen_hint_ > 0) ex.set_kvcache_max_seqlen_hint(max_seqlen_hint_);
    net.input(ex, d.hidden, mat_2d(hidden.data(), rows, cfg.hidden_size));
    net.input(ex, d.mask, mat_2d(mask.data(), rows, start + rows));
    net.input(ex, d.cos, mat_2d(rope.cos.data(), rope.rows, rope.width));
    net.input(ex, d.sin, mat_2d(rope.sin.data(), rope.rows, rope.width));
    for (size_t i = 0; i < extra.size(); ++i) {
      if (extra[i]) {
        const NetInput& in = *extra[i];
        net.input(ex, decoder_.extra_inputs()[i], mat_2d(in.data.data(), in.rows, in.cols));
      } else {
        if (zeros.size() != hidden.size()) zeros.assign(hidden.size(), 0.0f);
        net.input(ex, decoder_.extra_inputs()[i], mat_2d(zeros.data(), rows, cfg.hidden_size));
      }
    }
    for (size_t i = 0; i < d.cache_inputs.size(); ++i)
      net.input(ex, d.cache_inputs[i], caches_.empty() ? ncnn::Mat() : caches_[i]);
    out = net.extract(ex, d.output);
    for (size_t i = 0; i < d.cache_outputs.size(); ++i) {
      grown[i] = net.extract(ex, d.cache_outputs[i], 1);  // type 1: keep the opaque cache layout
      if (grown[i].dims != 3 || grown[i].h != start + rows)
        throw Error(net.files().param + ": cache \"" + d.cache_outputs[i] + "\" holds "
            + std::to_string(grown[i].h) +
                    " tokens, expected " + std::to_string(start + rows));
    }
  }
  if (out.dims != 2 || out.h != rows || out.w != cfg.hidden_size)
    throw Error(net.files().param + ": output \"" + d.output + "\" is not [" + std::to_string(rows) + ", " +
                std::to_string(cfg.hidden_size) + "]");
  caches_.swap(grown);
  position_ += rows;
  const float* last = out.row(rows - 1);
  return std::vector<float>(last, last + cfg.hidden_size);
}

}  // namespace gsurg
