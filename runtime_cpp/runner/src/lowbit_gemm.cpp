// LowBitGemm and LowBitNet (lowbit_gemm.hpp).
#include "pvl/lowbit_gemm.hpp"

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

#include "pvl/error.hpp"
#include "pvl/files.hpp"

namespace pvl {

namespace {
std::atomic<int> g_packed_layers{0};
std::atomic<int> g_int8_layers{0};
}  // namespace

int packed_gemm_layers() { return g_packed_layers.load(); }
int int8_gemm_layers() { return g_int8_layers.load(); }

namespace {

// One thread, no packing, no fp16 or bf16: the options under which the probes compare outputs bit for bit.
ncnn::Option exact_fp32_option() {
  ncnn::Option opt;
  opt.num_threads = 1;
  opt.use_packing_layout = false;
  opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = false;
  opt.use_bf16_storage = opt.use_bf16_packed = false;
  opt.use_vulkan_compute = false;
  return opt;
}

// Whether ncnn's builtin Gemm and the kernel instance `kernel` under `rounding` agree bit for bit on one
// random 4-bit case (K 256, N 40: five column groups, an odd count; M 5: a four-row tile and a one-row
// one; block 32, input-scale format 0 or 1, A over twelve octaves so that the two roundings part); false
// too when ncnn refuses the case.
bool agrees(int format, lowbit::Rounding rounding, lowbit::Kernel kernel) {
  constexpr int K = 256, N = 40, M = 5, kBlock = 32, kBits = 4;
  std::mt19937 rng(20261203u + static_cast<unsigned>(format));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(-1.f, 1.f), positive(1.f, 90.f);
  std::uniform_int_distribution<int> octave(-6, 6);
  ncnn::Mat codes(K * kBits / 8 * N, static_cast<size_t>(1u));
  for (int i = 0; i < K * kBits / 8 * N; ++i) static_cast<unsigned char*>(codes.data)[i] =
      static_cast<unsigned char>(byte(rng));
  ncnn::Mat scales(K / kBlock * N), input_scales(K), a(K, M);
  for (int i = 0; i < K / kBlock * N; ++i) scales[i] = positive(rng);
  for (int i = 0; i < K; ++i) input_scales[i] = positive(rng) / 30.f;
  for (int i = 0; i < K * M; ++i) a[i] = std::ldexp(unit(rng), octave(rng));

  ncnn::ParamDict pd;
  pd.set(3, 1);  // transB
  pd.set(5, 1);  // constant B
  pd.set(7, M);
  pd.set(8, N);
  pd.set(9, K);
  pd.set(18, kBits * 100 + format * 10);  // block 32
  const ncnn::Option opt = exact_fp32_option();
  std::unique_ptr<ncnn::Layer> builtin(ncnn::create_layer_cpu(ncnn::LayerType::Gemm));
  const ncnn::Mat weights[3] = {codes, scales, input_scales};
  ncnn::ModelBinFromMatArray mb(weights);
  std::vector<ncnn::Mat> bottoms(1, a), tops(1);
  if (!builtin || builtin->load_param(pd) != 0 || builtin->load_model(mb) != 0 ||
      builtin->create_pipeline(opt) != 0 || builtin->forward(bottoms, tops, opt) != 0 || tops[0].w != N ||
      tops[0].h != M)
    return false;

  lowbit::PackedWeights w = lowbit::pack_codes(kBits, kBlock, K, N, static_cast<const unsigned char*>(codes.data));
  lowbit::attach_scales(w, scales, format == 1 ? static_cast<const float*>(input_scales) : nullptr);
  std::vector<float> out(static_cast<size_t>(M) * N);
  lowbit::gemm(w, a, K, M, lowbit::Bias(), 1.f, out.data(), N, 1, rounding, kernel);
  builtin->destroy_pipeline(opt);
  return std::memcmp(out.data(), tops[0].data, out.size() * sizeof(float)) == 0;
}

// 0: separate, 1: fused, -1: neither reproduces this ncnn's loop (LowBitGemm then takes nothing over).
// Measured with the 8-lane instance, the one every build has.
int measure_rounding() {
  for (const lowbit::Rounding r : {lowbit::Rounding::kSeparate, lowbit::Rounding::kFused})
    if (agrees(0, r, lowbit::Kernel::kEightLanes) && agrees(1, r, lowbit::Kernel::kEightLanes))
      return r == lowbit::Rounding::kFused ? 1 : 0;
  return -1;
}

lowbit::Rounding measured_rounding() {
  return ncnn_loop_rounding() == 1 ? lowbit::Rounding::kFused : lowbit::Rounding::kSeparate;
}

// The instance kBest stands for: the widest where it agrees with ncnn as the 8-lane one does, else the
// 8-lane one (a wider instance this machine runs is then not trusted with any Gemm).
lowbit::Kernel measure_best_kernel() {
  if (ncnn_loop_rounding() < 0) return lowbit::Kernel::kEightLanes;
  const lowbit::Rounding r = measured_rounding();
  return agrees(0, r, lowbit::Kernel::kBest) && agrees(1, r, lowbit::Kernel::kBest) ? lowbit::Kernel::kBest
                                                                                      : lowbit::Kernel::kEightLanes;
}

// Whether ncnn's builtin 8-bit Gemm and the int8 kernel under `descale` agree bit for bit on one random
// decode-step case (M 1, K 256, N 48, block 64, input-scale format 0 or 1); false too when ncnn refuses it.
bool int8_agrees(int format, int8k::Descale descale) {
  constexpr int K = 256, N = 48, kBlock = 64;
  std::mt19937 rng(20261204u + static_cast<unsigned>(format));
  std::uniform_int_distribution<int> code(-127, 127);
  std::uniform_real_distribution<float> unit(-1.f, 1.f), positive(1.f, 90.f);
  std::uniform_int_distribution<int> octave(-6, 6);
  ncnn::Mat codes(K * N, static_cast<size_t>(1u));
  for (int i = 0; i < K * N; ++i)
    static_cast<signed char*>(codes.data)[i] = static_cast<signed char>(code(rng));
  ncnn::Mat scales(K / kBlock * N), input_scales(K), a(K, 1);
  for (int i = 0; i < K / kBlock * N; ++i) scales[i] = positive(rng);
  for (int i = 0; i < K; ++i) input_scales[i] = positive(rng) / 30.f;
  for (int i = 0; i < K; ++i) a[i] = std::ldexp(unit(rng), octave(rng));

  ncnn::ParamDict pd;
  pd.set(3, 1);  // transB
  pd.set(5, 1);  // constant B
  pd.set(7, 1);
  pd.set(8, N);
  pd.set(9, K);
  pd.set(18, 800 + format * 10 + 1);  // block 64
  std::unique_ptr<ncnn::Layer> builtin(ncnn::create_layer_cpu(ncnn::LayerType::Gemm));
  ncnn::Mat weights[3] = {codes, scales, input_scales};
  ncnn::ModelBinFromMatArray mb(weights);
  const ncnn::Option opt = exact_fp32_option();
  std::vector<ncnn::Mat> bottoms(1, a), tops(1);
  if (!builtin || builtin->load_param(pd) != 0 || builtin->load_model(mb) != 0 ||
      builtin->create_pipeline(opt) != 0 || builtin->forward(bottoms, tops, opt) != 0 || tops[0].w != N ||
      tops[0].h != 1)
    return false;
  int8k::Int8Weights w = int8k::pack_codes(kBlock, K, N, static_cast<const signed char*>(codes.data));
  int8k::attach_scales(w, scales, format == 1 ? static_cast<const float*>(input_scales) : nullptr);
  std::vector<float> out(N);
  int8k::gemm(w, a, K, 1, out.data(), N, 1, descale);
  builtin->destroy_pipeline(opt);
  return std::memcmp(out.data(), tops[0].data, out.size() * sizeof(float)) == 0;
}

int measure_int8_descale() {
  if (!int8k::available()) return -1;
  for (const int8k::Descale d : {int8k::Descale::kReciprocal, int8k::Descale::kDivide})
    if (int8_agrees(0, d) && int8_agrees(1, d)) return d == int8k::Descale::kReciprocal ? 1 : 0;
  return -1;
}

}  // namespace

int int8_descale() {
  static const int measured = measure_int8_descale();
  return measured;
}

int ncnn_loop_rounding() {
  static const int measured = measure_rounding();
  return measured;
}

lowbit::Kernel proven_best_kernel() {
  static const lowbit::Kernel measured = measure_best_kernel();
  return measured;
}

const char* lowbit_kernel_in_use() {
  return lowbit::kernel_name(measured_rounding(), proven_best_kernel());
}

LowBitGemm::LowBitGemm(lowbit::Kernel kernel, bool exact_fp32, int threads)
    : kernel_(kernel),
      exact_fp32_(exact_fp32),
      threads_(std::max(1, threads)),
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
    // The int8 kernel's form: no C (none, or constant of broadcast -1), alpha 1, exact fp32 options.
    const bool no_c = pd.get(6, 0) == 0 ? bottoms.size() < 2 : pd.get(10, 0) == -1;
    if ((format != 0 && format != 1) || !no_c || pd.get(0, 1.f) != 1.f || !exact_fp32_ ||
        !int8k::packable(block, pd.get(9, 0)) || int8_descale() < 0)
      return 0;
    descale_ = int8_descale() == 1 ? int8k::Descale::kReciprocal : int8k::Descale::kDivide;
    // The kernel reads fp32 rows of elempack 1 and writes the same (the builtin would pack).
    support_packing = false;
    support_any_packing = false;
    support_fp16_storage = false;
    support_bf16_storage = false;
  } else if (!lowbit_form || !lowbit::packable(bits, block, pd.get(9, 0)) || ncnn_loop_rounding() < 0) {
    return 0;
  } else {
    rounding_ = measured_rounding();
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
  if (builtin_) return builtin_->load_model(mb);
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
    int8k::gemm(int8_weights_, static_cast<const float*>(a.data), a_stride, m, static_cast<float*>(top.data),
                static_cast<size_t>(top.w), opt.num_threads, descale_, rows);
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
  ncnn::Layer* layer = new LowBitGemm(proven_best_kernel(), exact_fp32, opt.num_threads);
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

}  // namespace pvl
