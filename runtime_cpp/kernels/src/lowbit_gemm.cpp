// LowBitGemm and LowBitNet (lowbit_gemm.hpp).
#include "gsurg/lowbit_gemm.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include <memory>

#include <layer_type.h>
#include <modelbin.h>
#include <paramdict.h>

#include "gsurg/error.hpp"
#include "gsurg/files.hpp"

namespace gsurg {

namespace {
std::atomic<int> g_packed_layers{0};
std::atomic<int> g_int8_layers{0};
std::atomic<int> g_w4a8_layers{0};
}  // namespace

int packed_gemm_layers() { return g_packed_layers.load(); }
int int8_gemm_layers() { return g_int8_layers.load(); }
int w4a8_gemm_layers() { return g_w4a8_layers.load(); }

LowBitGemm::LowBitGemm(lowbit::Kernel kernel, bool exact_fp32, int threads, bool quantize_int4_input)
    : kernel_(kernel),
      exact_fp32_(exact_fp32),
      threads_(std::max(1, threads)),
      quantize_int4_input_(quantize_int4_input),
      builtin_(ncnn::create_layer_cpu(ncnn::LayerType::Gemm)) {
  take_flags(*builtin_);
}

LowBitGemm::~LowBitGemm() { delete builtin_; }

void LowBitGemm::take_flags(const ncnn::Layer& from) {
  one_blob_only = from.one_blob_only;
  support_inplace = from.support_inplace;
  support_vulkan = from.support_vulkan;
  support_packing = from.support_packing;
  support_bf16_storage = from.support_bf16_storage;
  support_fp16_storage = from.support_fp16_storage;
  support_int8_storage = from.support_int8_storage;
  support_tensor_storage = from.support_tensor_storage;
  support_vulkan_packing = from.support_vulkan_packing;
  support_any_packing = from.support_any_packing;
  support_vulkan_any_packing = from.support_vulkan_any_packing;
  support_batch = from.support_batch;
}

int LowBitGemm::load_param(const ncnn::ParamDict& pd) {
  ncnn::Layer& b = *builtin_;
  b.type = type;
  b.name = name;
  b.typeindex = typeindex;
  b.bottoms = bottoms;
  b.tops = tops;
  b.bottom_shapes = bottom_shapes;
  b.top_shapes = top_shapes;
  b.featmask = featmask;
  const int ret = b.load_param(pd);
  take_flags(b);
  if (ret != 0) return ret;
  widen_b_ = pd.get(4, 0) == 0 && pd.get(5, 0) == 1;

  const int quantize_term = pd.get(18, 0);
  const int bits = quantize_term / 100;
  const int format = quantize_term % 100 / 10;
  const int block_code = quantize_term % 10;
  const int block = block_code == 0 ? 32 : block_code == 1 ? 64 : block_code == 2 ? 128 : 0;
  const bool lowbit_form = (bits == 4 || bits == 6) && (format == 0 || format == 1) && block != 0;
  const bool plain_shape = pd.get(2, 0) == 0 && pd.get(3, 0) == 1 && pd.get(4, 0) == 0 && pd.get(5, 0) == 1 &&
                           pd.get(11, 0) == 0 && pd.get(12, 0) == 0 && pd.get(14, 0) == 0;
  const int elemtype = pd.get(13, 0);
  if (!plain_shape || (elemtype != 0 && elemtype != 1)) return 0;  // the builtin layer runs it
  if (bits == 8) {
    // The int8 kernel's form: no C (none, or constant of broadcast -1), any alpha, exact fp32 options.
    const bool no_c = pd.get(6, 0) == 0 ? bottoms.size() < 2 : pd.get(10, 0) == -1;
    if ((format != 0 && format != 1) || !no_c || !exact_fp32_ ||
        !int8k::packable(block, pd.get(9, 0)) || int8_descale() < 0)
      return 0;
    descale_ = int8_descale() == 1 ? int8k::Descale::kReciprocal : int8k::Descale::kDivide;
    // The kernel reads fp32 rows of elempack 1 and writes the same (the builtin would pack).
    support_packing = false;
    support_any_packing = false;
    support_fp16_storage = false;
    support_bf16_storage = false;
  } else if (bits == 4 && lowbit_form && quantize_int4_input_ && w4a8::accelerated() &&
             w4a8::packable(block, pd.get(9, 0))) {
    use_w4a8_ = true;  // not ncnn's arithmetic: asked for (w4a8_kernel.hpp)
  } else if (!lowbit_form || !lowbit::packable(bits, block, pd.get(9, 0)) || ncnn_loop_rounding() < 0) {
    return 0;
  } else {
    rounding_ = ncnn_loop_rounding() == 1 ? lowbit::Rounding::kFused : lowbit::Rounding::kSeparate;
  }

  alpha_ = pd.get(0, 1.f);
  beta_ = pd.get(1, 1.f);
  constant_tile_m_ = pd.get(20, 0);
  constant_c_ = pd.get(6, 0);
  constant_m_ = pd.get(7, 0);
  n_ = pd.get(8, 0);
  k_ = pd.get(9, 0);
  broadcast_c_ = pd.get(10, 0);
  bits_ = bits;
  block_ = block;
  has_input_scale_ = format == 1;
  delete builtin_;
  builtin_ = nullptr;
  return 0;
}

int LowBitGemm::load_model(const ncnn::ModelBin& mb) {
  if (builtin_) {
    if (widener_ && widen_b_) widener_->arm();
    const int ret = builtin_->load_model(mb);
    if (widener_) widener_->disarm();
    return ret;
  }
  // ncnn's Gemm::load_model order for these weights: the codes (rows of K*bits/8 bytes, read as type
  // `bits`: raw bytes, 4-aligned), C when constant and its broadcast type is not -1, the scales per block,
  // the input scales.
  // Each part is packed as soon as it is read: with a mapped .bin, the reader drops the pages of what came
  // before as the next read begins, and packing later would fault them back for the rest of the load.
  {
    const ncnn::Mat codes = mb.load(k_ * bits_ / 8, n_, bits_);
    if (codes.empty()) return -100;
    if (bits_ == 8)
      int8_weights_ =
          int8k::pack_codes(block_, k_, n_, static_cast<const signed char*>(codes.data), threads_);
    else if (use_w4a8_)
      w4a8_weights_ = w4a8::pack_codes(block_, k_, n_, static_cast<const unsigned char*>(codes.data), threads_);
    else
      weights_ = lowbit::pack_codes(bits_, block_, k_, n_, static_cast<const unsigned char*>(codes.data));
  }
  if (constant_c_ == 1 && broadcast_c_ != -1) {
    if (broadcast_c_ == 0) c_ = mb.load(1, 0);
    if (broadcast_c_ == 1) c_ = mb.load(constant_m_, 0);
    if (broadcast_c_ == 2) c_ = mb.load(1, constant_m_, 0);
    if (broadcast_c_ == 3) c_ = mb.load(n_, constant_m_, 0);
    if (broadcast_c_ == 4) c_ = mb.load(n_, 1, 0);
    if (c_.empty()) return -100;
  }
  const ncnn::Mat scales = mb.load((k_ + block_ - 1) / block_, n_, 1);
  if (scales.empty()) return -100;
  ncnn::Mat input_scales;
  if (has_input_scale_) {
    input_scales = mb.load(k_, 1);
    if (input_scales.empty()) return -100;
  }
  const float* input_scale_data = has_input_scale_ ? static_cast<const float*>(input_scales.data) : nullptr;
  if (bits_ == 8) {
    int8k::attach_scales(int8_weights_, static_cast<const float*>(scales.data), input_scale_data);
    ++g_int8_layers;
    return 0;
  }
  if (use_w4a8_) {
    w4a8::attach_scales(w4a8_weights_, static_cast<const float*>(scales.data), input_scale_data);
    ++g_w4a8_layers;
    return 0;
  }
  lowbit::attach_scales(weights_, static_cast<const float*>(scales.data), input_scale_data);
  ++g_packed_layers;
  return 0;
}

int LowBitGemm::create_pipeline(const ncnn::Option& opt) {
  if (builtin_) {
    const int ret = builtin_->create_pipeline(opt);
    take_flags(*builtin_);
    return ret;
  }
  (void)opt;  // packed as it was read (load_model)
  return 0;
}

int LowBitGemm::destroy_pipeline(const ncnn::Option& opt) {
  if (builtin_) return builtin_->destroy_pipeline(opt);
  return 0;  // the packed weights belong to the model (load_model), not to the pipeline
}

int LowBitGemm::forward(const std::vector<ncnn::Mat>& bottom_blobs, std::vector<ncnn::Mat>& top_blobs,
                        const ncnn::Option& opt) const {
  if (builtin_) return builtin_->forward(bottom_blobs, top_blobs, opt);
  const ncnn::Mat& a = bottom_blobs[0];
  // support_packing, fp16 and bf16 storage are off (ncnn's flags for these weights): fp32 rows, elempack 1.
  if (a.elemsize != 4 || a.elempack != 1 || a.w != k_) return -1;
  const int m = a.dims == 3 ? a.c : a.h;
  const size_t a_stride = a.dims == 3 ? a.cstep : static_cast<size_t>(a.w);
  if (bits_ == 8) {
    ncnn::Mat& top = top_blobs[0];
    top.create(n_, m, static_cast<size_t>(4u), opt.blob_allocator);
    if (top.empty()) return -100;
    const int8k::RowForms rows =
        m == 1 ? int8k::RowForms() : int8k::ncnn_row_forms(m, k_, block_, constant_tile_m_, opt.num_threads);
    int8k::gemm(int8_weights_, static_cast<const float*>(a.data), a_stride, m, alpha_,
                static_cast<float*>(top.data), static_cast<size_t>(top.w), opt.num_threads, descale_, rows);
    return 0;
  }

  lowbit::Bias bias;
  bias.beta = beta_;
  if (constant_c_) {
    if (!c_.empty()) {
      bias.c = static_cast<const float*>(c_.data);
      bias.broadcast = broadcast_c_;
    }
  } else if (bottom_blobs.size() == 2 && !bottom_blobs[1].empty()) {
    // The broadcast ncnn's loop infers from C's shape (the last that matches wins, as there).
    const ncnn::Mat& c = bottom_blobs[1];
    int broadcast = 0;
    if (c.dims == 1 && c.w == 1) broadcast = 0;
    if (c.dims == 1 && c.w == m) broadcast = 1;
    if (c.dims == 1 && c.w == n_) broadcast = 4;
    if (c.dims == 2 && c.w == 1 && c.h == m) broadcast = 2;
    if (c.dims == 2 && c.w == n_ && c.h == m) broadcast = 3;
    if (c.dims == 2 && c.w == n_ && c.h == 1) broadcast = 4;
    bias.c = static_cast<const float*>(c.data);
    bias.broadcast = broadcast;
  }

  ncnn::Mat& top = top_blobs[0];
  top.create(n_, m, static_cast<size_t>(4u), opt.blob_allocator);
  if (top.empty()) return -100;
  if (use_w4a8_)
    w4a8::gemm(w4a8_weights_, static_cast<const float*>(a.data), a_stride, m, bias, alpha_,
               static_cast<float*>(top.data), static_cast<size_t>(top.w), opt.num_threads);
  else
    lowbit::gemm(weights_, static_cast<const float*>(a.data), a_stride, m, bias, alpha_,
                 static_cast<float*>(top.data), static_cast<size_t>(top.w), opt.num_threads, rounding_, kernel_);
  return 0;
}

int LowBitGemm::forward(const ncnn::Mat& bottom_blob, ncnn::Mat& top_blob, const ncnn::Option& opt) const {
  if (builtin_) return builtin_->forward(bottom_blob, top_blob, opt);
  std::vector<ncnn::Mat> bottoms_in(1, bottom_blob);
  std::vector<ncnn::Mat> tops_out(1, top_blob);
  const int ret = forward(bottoms_in, tops_out, opt);
  top_blob = tops_out[0];
  return ret;
}

ncnn::Layer* LowBitNet::create_overwrite_builtin_layer(int typeindex) {
  if (typeindex != ncnn::LayerType::Gemm) return ncnn::Net::create_overwrite_builtin_layer(typeindex);
  const bool exact_fp32 = !opt.use_packing_layout && !opt.use_fp16_storage && !opt.use_fp16_arithmetic &&
                          !opt.use_bf16_storage;
  LowBitGemm* layer = new LowBitGemm(proven_best_kernel(), exact_fp32, opt.num_threads, quantize_int4_input_);
  if (exact_fp32 && opt.lightmode) layer->widen_with(widener_);
  layer->typeindex = typeindex;
  return layer;
}

bool has_block_quantized_gemm(const std::string& param_path) {
  std::string text;
  try {
    text = read_file(param_path);
  } catch (const Error&) {
    return false;  // ncnn's own load reports it
  }
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 5, "Gemm ") != 0) continue;
    std::istringstream fields(line);
    std::string field;
    while (fields >> field) {
      if (field.size() == 6 && field.compare(0, 3, "18=") == 0 &&
          (field[3] == '4' || field[3] == '6' || field[3] == '8'))
        return true;
    }
  }
  return false;
}

}  // namespace gsurg
