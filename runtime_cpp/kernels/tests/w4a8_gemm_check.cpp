// w4a8_gemm_check: the opt-in 4-bit kernel that quantizes its input (kernels/include/gsurg/w4a8_kernel.hpp), as
// w4a8::gemm and as LowBitGemm runs it with quantize_int4_input.
//
//   1. every instance this CPU runs (the widest, the 8-lane one, the portable loop) and LowBitGemm give,
//      bit for bit (memcmp), the output of this file's own model of the arithmetic w4a8_kernel.hpp states,
//      written here from that statement and from ncnn's 4-bit records (not from the kernel's layout), for
//      every row count, thread count, block, input-scale format, C and alpha below;
//   2. the model is tied to ncnn's builtin Gemm (its float loop on the same weights): every output is within
//      the error that rounding the input to 8 bits can make, |out - ncnn| <= |alpha| * (sum_k |w[j][k]| *
//      descale_a[b(k)] / 2 + (K + 8) * 2^-23 * sum_k |v[k] w[j][k]|), w the dequantized weight; and fed the
//      input the model rounds it to, ncnn gives every output within the float-rounding term alone, a bound
//      checked to be tight (for at least 90 % of outputs the next column's value falls outside it);
//   3. LowBitGemm without quantize_int4_input, and with it for forms the kernel does not take (6 bits, K not
//      a whole number of blocks), does not take the w4a8 kernel, and its output equals ncnn's.
// Where no SIMD instance runs (w4a8::accelerated() false), LowBitGemm must not take the kernel; 1. still
// runs the portable loop.
//
// Exit status 0 when every check holds, 1 otherwise (printing the first failure of each case).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <layer.h>
#include <layer_type.h>
#include <mat.h>
#include <modelbin.h>
#include <option.h>
#include <paramdict.h>

#include "gsurg/lowbit_gemm.hpp"
#include "gsurg/w4a8_kernel.hpp"

namespace {

struct Case {
  int bits, format, block, K, N, M, threads;
  int c_mode;  // -2 none; else constant C of ncnn's broadcast type 0, 1, 3 or 4
  float alpha, beta;
};

std::string describe(const Case& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "bits %d format %d block %d K %d N %d M %d threads %d C %d alpha %g beta %g",
                c.bits, c.format, c.block, c.K, c.N, c.M, c.threads, c.c_mode, c.alpha, c.beta);
  return buf;
}

struct Data {
  std::vector<unsigned char> codes;  // N rows of K * bits / 8 bytes (ncnn's bit stream)
  std::vector<float> scales;         // N rows of ceil(K / block)
  std::vector<float> input_scales;   // K, or empty
  std::vector<float> c;              // C as its broadcast type holds it, or empty
  std::vector<float> a;              // M rows of K
};

size_t c_size(const Case& c) {
  switch (c.c_mode) {
    case 0: return 1;
    case 1: return static_cast<size_t>(c.M);
    case 3: return static_cast<size_t>(c.M) * c.N;
    case 4: return static_cast<size_t>(c.N);
    default: return 0;
  }
}

Data make(const Case& c, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(-1.f, 1.f), positive(1.f, 90.f);
  std::uniform_int_distribution<int> octave(-6, 6);
  Data d;
  d.codes.resize(static_cast<size_t>(c.K) * c.bits / 8 * c.N);
  for (auto& b : d.codes) b = static_cast<unsigned char>(byte(rng));
  d.scales.resize(static_cast<size_t>((c.K + c.block - 1) / c.block) * c.N);
  for (auto& s : d.scales) s = positive(rng);
  if (c.format == 1) {
    d.input_scales.resize(c.K);
    for (auto& s : d.input_scales) s = positive(rng) / 30.f;
  }
  d.c.resize(c_size(c));
  for (auto& v : d.c) v = unit(rng) * 4.f;
  d.a.resize(static_cast<size_t>(c.M) * c.K);
  for (auto& v : d.a) v = std::ldexp(unit(rng), octave(rng));
  return d;
}

// Code k of row j of a 4-bit bit stream: a two's complement nibble, low nibble first.
int code4(const Data& d, const Case& c, int j, int k) {
  const unsigned char byte = d.codes[static_cast<size_t>(j) * c.K / 2 + k / 2];
  const int nibble = k % 2 == 0 ? byte & 0x0f : byte >> 4;
  return nibble >= 8 ? nibble - 16 : nibble;
}

float c_at(const Data& d, const Case& c, int i, int j) {
  switch (c.c_mode) {
    case 0: return d.c[0];
    case 1: return d.c[i];
    case 3: return d.c[static_cast<size_t>(i) * c.N + j];
    case 4: return d.c[j];
    default: return 0.f;
  }
}

float input_at(const Data& d, int i, int K, int k) {
  const float v = d.a[static_cast<size_t>(i) * K + k];
  return d.input_scales.empty() ? v : v * d.input_scales[k];
}

// --- the model of w4a8_kernel.hpp's statement --------------------------------------------------------------

struct Model {
  std::vector<float> out;        // M x N
  std::vector<float> descale_a;  // M x blocks
  std::vector<int> q;            // M x K
};

Model model(const Case& c, const Data& d) {
  const int blocks = c.K / c.block;
  Model m;
  m.out.resize(static_cast<size_t>(c.M) * c.N);
  m.descale_a.resize(static_cast<size_t>(c.M) * blocks);
  m.q.resize(static_cast<size_t>(c.M) * c.K);
  for (int i = 0; i < c.M; ++i) {
    int* q = m.q.data() + static_cast<size_t>(i) * c.K;
    for (int b = 0; b < blocks; ++b) {
      float absmax = 0.f;
      for (int k = b * c.block; k < (b + 1) * c.block; ++k) absmax = std::max(absmax, std::fabs(input_at(d, i, c.K, k)));
      const float scale = absmax == 0.f ? 0.f : 127.f / absmax;
      m.descale_a[static_cast<size_t>(i) * blocks + b] = absmax == 0.f ? 0.f : absmax / 127.f;
      for (int k = b * c.block; k < (b + 1) * c.block; ++k) {
        const float t = input_at(d, i, c.K, k) * scale;
        const float adj = t + (std::signbit(t) ? -0.5f : 0.5f);
        q[k] = std::max(-127, std::min(127, static_cast<int>(adj)));
      }
    }
    for (int j = 0; j < c.N; ++j) {
      float fsum = 0.f;
      for (int b = 0; b < blocks; ++b) {
        int32_t isum = 0;
        for (int k = b * c.block; k < (b + 1) * c.block; ++k) isum += q[k] * code4(d, c, j, k);
        const float descale_w = 1.f / d.scales[static_cast<size_t>(j) * blocks + b];
        const float step = m.descale_a[static_cast<size_t>(i) * blocks + b] * descale_w;
        fsum = fsum + static_cast<float>(isum) * step;
      }
      if (c.c_mode != -2) fsum = fsum + c.beta * c_at(d, c, i, j);
      if (c.alpha != 1.f) fsum = fsum * c.alpha;
      m.out[static_cast<size_t>(i) * c.N + j] = fsum;
    }
  }
  return m;
}

// --- ncnn's layer and LowBitGemm on the same weights -------------------------------------------------------

ncnn::Option options(int threads) {
  ncnn::Option opt;
  opt.num_threads = threads;
  opt.use_packing_layout = false;
  opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = false;
  opt.use_bf16_storage = opt.use_bf16_packed = false;
  opt.use_vulkan_compute = false;
  return opt;
}

int block_code(int block) { return block == 32 ? 0 : block == 64 ? 1 : 2; }

std::vector<float> run(ncnn::Layer* layer, const Case& c, const Data& d, bool* ok) {
  *ok = false;
  ncnn::ParamDict pd;
  pd.set(0, c.alpha);
  pd.set(1, c.beta);
  pd.set(3, 1);
  pd.set(5, 1);
  pd.set(6, c.c_mode == -2 ? 0 : 1);
  pd.set(7, c.M);
  pd.set(8, c.N);
  pd.set(9, c.K);
  pd.set(10, c.c_mode == -2 ? 0 : c.c_mode);
  pd.set(18, c.bits * 100 + c.format * 10 + block_code(c.block));
  const int blocks = (c.K + c.block - 1) / c.block;
  std::vector<ncnn::Mat> mats;
  mats.push_back(ncnn::Mat(c.K * c.bits / 8 * c.N, const_cast<unsigned char*>(d.codes.data()),
                           static_cast<size_t>(1u)));
  if (c.c_mode != -2) mats.push_back(ncnn::Mat(static_cast<int>(d.c.size()), const_cast<float*>(d.c.data())));
  mats.push_back(ncnn::Mat(blocks * c.N, const_cast<float*>(d.scales.data())));
  if (c.format == 1) mats.push_back(ncnn::Mat(c.K, const_cast<float*>(d.input_scales.data())));
  const ncnn::Option opt = options(c.threads);
  ncnn::ModelBinFromMatArray mb(mats.data());
  if (layer->load_param(pd) != 0 || layer->load_model(mb) != 0 || layer->create_pipeline(opt) != 0) return {};
  ncnn::Mat a(c.K, c.M);
  std::memcpy(a.data, d.a.data(), d.a.size() * sizeof(float));
  std::vector<ncnn::Mat> bottoms(1, a), tops(1);
  const int ret = layer->forward(bottoms, tops, opt);
  layer->destroy_pipeline(opt);
  if (ret != 0 || tops[0].w != c.N || tops[0].h != c.M) return {};
  std::vector<float> out(static_cast<size_t>(c.M) * c.N);
  for (int i = 0; i < c.M; ++i) std::memcpy(&out[static_cast<size_t>(i) * c.N], tops[0].row(i), sizeof(float) * c.N);
  *ok = true;
  return out;
}

bool same_bits(const std::vector<float>& want, const std::vector<float>& got, const Case& c, const std::string& what) {
  if (got.size() != want.size()) {
    std::printf("FAIL %s: %zu outputs, want %zu (%s)\n", what.c_str(), got.size(), want.size(), describe(c).c_str());
    return false;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0) {
      std::printf("FAIL %s: out[%zu][%zu] want %.9g, got %.9g (%s)\n", what.c_str(), i / c.N, i % c.N, want[i], got[i],
                  describe(c).c_str());
      return false;
    }
  }
  return true;
}

// Check 2: the model against ncnn's float loop. With the input A, within what rounding it to 8 bits can make
// (a worst case: the largest |diff| is reported as a fraction of it). With A replaced by the quantized input
// the model rounds it to (q * descale_a, divided by the input scale where there is one), within float
// rounding only -- a bound tight enough that a product off by a column fails it almost everywhere, which
// is checked too.
bool against_ncnn(const Case& c, const Data& d, const Model& m, const std::vector<float>& ncnn_out, bool rounded,
                  double* worst_ratio) {
  const int blocks = c.K / c.block;
  int discriminated = 0, pairs = 0;  // outputs whose neighbour column's ncnn value falls outside the bound
  for (int i = 0; i < c.M; ++i) {
    for (int j = 0; j < c.N; ++j) {
      double quant = 0, magnitude = 0;
      for (int k = 0; k < c.K; ++k) {
        const double w = static_cast<double>(code4(d, c, j, k)) / d.scales[static_cast<size_t>(j) * blocks + k / c.block];
        quant += std::fabs(w) * m.descale_a[static_cast<size_t>(i) * blocks + k / c.block] / 2;
        magnitude += std::fabs(w * input_at(d, i, c.K, k));
      }
      const double slack = (c.K + 8) * std::ldexp(1.0, -23) * (magnitude + std::fabs(c.beta * c_at(d, c, i, j)));
      const double bound = std::fabs(c.alpha) * ((rounded ? 0.0 : quant) + slack) + 1e-30;
      const size_t at = static_cast<size_t>(i) * c.N + j;
      const double err = std::fabs(static_cast<double>(m.out[at]) - ncnn_out[at]);
      if (!(err <= bound)) {
        std::printf("FAIL model vs ncnn (%s): out[%d][%d] %.9g vs ncnn %.9g, |diff| %.3g over the bound %.3g (%s)\n",
                    rounded ? "input rounded" : "input as is", i, j, m.out[at], ncnn_out[at], err, bound,
                    describe(c).c_str());
        return false;
      }
      if (!rounded) *worst_ratio = std::max(*worst_ratio, err / bound);
      if (rounded && c.N > 1) {
        ++pairs;
        const size_t next = static_cast<size_t>(i) * c.N + (j + 1) % c.N;
        if (std::fabs(static_cast<double>(m.out[at]) - ncnn_out[next]) > bound) ++discriminated;
      }
    }
  }
  if (pairs > 0 && discriminated < 0.9 * pairs) {
    std::printf("FAIL the bound is loose: only %d of %d outputs are told from the next column's (%s)\n",
                discriminated, pairs, describe(c).c_str());
    return false;
  }
  return true;
}

bool check_taken(const Case& c, unsigned seed, double* worst_ratio) {
  const Data d = make(c, seed);
  const Model m = model(c, d);
  bool ok = true;
  // 1. every instance, straight
  {
    std::vector<unsigned char> rows = d.codes;
    gsurg::w4a8::Weights w = gsurg::w4a8::pack_codes(c.block, c.K, c.N, rows.data(), c.threads);
    gsurg::w4a8::attach_scales(w, d.scales.data(), c.format == 1 ? d.input_scales.data() : nullptr);
    gsurg::lowbit::Bias bias;
    if (c.c_mode != -2) {
      bias.c = d.c.data();
      bias.broadcast = c.c_mode;
      bias.beta = c.beta;
    }
    for (const auto inst : {gsurg::w4a8::Instance::kBest, gsurg::w4a8::Instance::kEightLanes,
                            gsurg::w4a8::Instance::kScalar}) {
      std::vector<float> out(static_cast<size_t>(c.M) * c.N, std::nanf(""));
      gsurg::w4a8::gemm(w, d.a.data(), c.K, c.M, bias, c.alpha, out.data(), c.N, c.threads, inst);
      ok = same_bits(m.out, out, c, std::string("instance ") + gsurg::w4a8::instance_name(inst)) && ok;
    }
  }
  // 1. LowBitGemm with quantize_int4_input
  {
    gsurg::LowBitGemm layer(gsurg::lowbit::Kernel::kBest, true, c.threads, true);
    bool ran = false;
    const std::vector<float> out = run(&layer, c, d, &ran);
    if (!ran) {
      std::printf("FAIL LowBitGemm refused the case (%s)\n", describe(c).c_str());
      return false;
    }
    if (layer.w4a8() != gsurg::w4a8::accelerated()) {
      std::printf("FAIL LowBitGemm %s the w4a8 kernel where accelerated() is %d (%s)\n",
                  layer.w4a8() ? "took" : "did not take", gsurg::w4a8::accelerated() ? 1 : 0, describe(c).c_str());
      return false;
    }
    if (layer.w4a8()) ok = same_bits(m.out, out, c, "LowBitGemm w4a8") && ok;
  }
  // 2. ncnn
  std::unique_ptr<ncnn::Layer> builtin(ncnn::create_layer_cpu(ncnn::LayerType::Gemm));
  bool ran = false;
  const std::vector<float> ncnn_out = run(builtin.get(), c, d, &ran);
  if (!ran) {
    std::printf("FAIL ncnn's Gemm refused the case (%s)\n", describe(c).c_str());
    return false;
  }
  ok = against_ncnn(c, d, m, ncnn_out, false, worst_ratio) && ok;
  Data rounded = d;
  const int blocks = c.K / c.block;
  for (int i = 0; i < c.M; ++i)
    for (int k = 0; k < c.K; ++k) {
      const size_t at = static_cast<size_t>(i) * c.K + k;
      const float v = static_cast<float>(m.q[at]) * m.descale_a[static_cast<size_t>(i) * blocks + k / c.block];
      rounded.a[at] = d.input_scales.empty() ? v : v / d.input_scales[k];
    }
  std::unique_ptr<ncnn::Layer> builtin2(ncnn::create_layer_cpu(ncnn::LayerType::Gemm));
  const std::vector<float> ncnn_rounded = run(builtin2.get(), c, rounded, &ran);
  if (!ran) {
    std::printf("FAIL ncnn's Gemm refused the case (%s)\n", describe(c).c_str());
    return false;
  }
  return against_ncnn(c, rounded, m, ncnn_rounded, true, worst_ratio) && ok;
}

// Check 3: a form LowBitGemm must leave to the exact path (or to ncnn), whose output is then ncnn's.
bool check_not_taken(const Case& c, bool quantize, unsigned seed) {
  const Data d = make(c, seed);
  gsurg::LowBitGemm layer(gsurg::lowbit::Kernel::kBest, true, c.threads, quantize);
  bool ran = false;
  const std::vector<float> out = run(&layer, c, d, &ran);
  std::unique_ptr<ncnn::Layer> builtin(ncnn::create_layer_cpu(ncnn::LayerType::Gemm));
  bool ran_ncnn = false;
  const std::vector<float> want = run(builtin.get(), c, d, &ran_ncnn);
  if (!ran || !ran_ncnn) {
    std::printf("FAIL a layer refused the case (%s)\n", describe(c).c_str());
    return false;
  }
  if (layer.w4a8()) {
    std::printf("FAIL LowBitGemm took the w4a8 kernel (quantize_int4_input %d) (%s)\n", quantize ? 1 : 0,
                describe(c).c_str());
    return false;
  }
  return same_bits(want, out, c, quantize ? "a form w4a8 does not take" : "without quantize_int4_input");
}

}  // namespace

int main() {
  std::printf("w4a8 instances here: best %s, eight lanes %s, portable %s; SIMD %s\n",
              gsurg::w4a8::instance_name(gsurg::w4a8::Instance::kBest),
              gsurg::w4a8::instance_name(gsurg::w4a8::Instance::kEightLanes),
              gsurg::w4a8::instance_name(gsurg::w4a8::Instance::kScalar), gsurg::w4a8::accelerated() ? "yes" : "no");
  const std::vector<Case> taken = {
      // bits format block K N M threads C alpha beta
      {4, 0, 64, 256, 48, 1, 1, -2, 1.f, 1.f},   // a decode step
      {4, 0, 32, 96, 40, 5, 2, -2, 1.f, 1.f},    // a partial column group, a four-row tile and one more
      {4, 1, 64, 192, 33, 3, 1, -2, 1.f, 1.f},   // input scales, 33 columns (a one-lane group)
      {4, 0, 128, 384, 17, 9, 2, 4, 1.f, 0.5f},  // C per column
      {4, 1, 32, 64, 16, 4, 1, 3, 0.25f, 2.f},   // a full C, alpha
      {4, 0, 64, 128, 7, 2, 2, 1, 1.f, 1.f},     // C per row, fewer columns than a half group
      {4, 0, 32, 32, 24, 1, 1, 0, -1.5f, 1.f},   // one block, a scalar C, negative alpha
      {4, 1, 128, 1024, 64, 8, 2, -2, 1.f, 1.f}, // several blocks of 128, two four-row tiles
  };
  int failures = 0;
  double worst = 0;
  unsigned seed = 20261205u;
  for (const Case& c : taken) failures += check_taken(c, seed++, &worst) ? 0 : 1;
  std::printf("model vs ncnn's float loop: the largest |diff| is %.3f of the rounding bound\n", worst);
  // 6 bits; K not a whole number of blocks (80 = one block of 64 and a partial one); the default path.
  failures += check_not_taken({6, 0, 64, 128, 24, 3, 1, -2, 1.f, 1.f}, true, seed++) ? 0 : 1;
  failures += check_not_taken({4, 0, 64, 80, 24, 3, 1, -2, 1.f, 1.f}, true, seed++) ? 0 : 1;
  failures += check_not_taken({4, 0, 64, 256, 48, 2, 1, -2, 1.f, 1.f}, false, seed++) ? 0 : 1;
  if (failures) {
    std::printf("%d case(s) failed\n", failures);
    return 1;
  }
  std::printf("all %zu taken cases and 3 left-alone cases hold\n", taken.size());
  return 0;
}
