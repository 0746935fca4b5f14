// MiniCPM-V-2's per-image position tables, computed as the Python reference computes them.
//
// resample_pos_table(): the ViT's learned side x side position table (row r * side + c, `channels` float32
// columns; side 27 for the real model) resampled to an image's patch grid h x w, as
// graphsurgeon/models/minicpm_v2/vision.py:resample_pos_table does with torch 2.13's
// F.interpolate(mode="bicubic", antialias=True, align_corners=False) in float32 (timm's
// resample_abs_pos_embed): the table itself when h == w == side; otherwise the separable Pillow-style filter
// of ATen's CPU kernel (aten/src/ATen/native/cpu/UpSampleKernel.cpp): per axis scale = in / out (float),
// support = 2 * max(scale, 1), the taps [xmin, xmin + xsize) around center = scale * (i + 0.5), weighted by
// the a = -0.5 Keys cubic of (j + xmin - center + 0.5) / max(scale, 1) and normalised by their float sum;
// the width pass first, then the height pass, each skipped when its side is unchanged; float32 throughout.
// Bit for bit with torch's x86-64 build at CPU capability AVX2, whose compiler fixed what the source leaves
// open: the cubic's polynomials evaluated with fused multiply-adds, and each output value the first tap's
// product, then (for five taps or more) the next taps four at a time as unfused products added in order,
// then each remaining tap one fused multiply-add. torch's default-capability build (no AVX2, ARM) rounds
// otherwise: up to 5e-6 apart on unit-variance tables (measured with ATEN_CPU_CAPABILITY=default).
//
// sincos_2d(): the resampler keys' 2-D sin-cos table for a patch grid h x w, as
// graphsurgeon/models/minicpm_v2/resampler.py:sincos_2d (the official get_2d_sincos_pos_embed) computes it
// in numpy float32: [h * w, dim], row i * w + j; with D = dim / 2 and omega_k = 1 / 10000^(k / (D / 2)) for
// k < D / 2, the columns sin(j omega), cos(j omega), sin(i omega), cos(i omega) (the column index first).
// omega: a float32 division, the C library's powf (numpy's float32 power), a float32 division; the angle a
// float32 product; sin and cos as numpy >= 2 computes float32 sin/cos on x86-64 with FMA3 (its SIMD kernel:
// the quadrant rint(x * 2/pi) from a fused multiply-add with 1.5 * 2^23, Cody-Waite reduction by pi/2 in
// three fused steps, minimax polynomials of fused multiply-adds), and past its reduction range
// (|x| > 117435.992 for sin, 71476.0625 for cos) the C library's sinf / cosf, as numpy calls them. numpy
// 1.26 (the official environment's) rounds the quadrant from an unfused product instead, which moves a few
// values at octant boundaries by 1 ulp (3 of the 2.4 million sin and cos values of positions 0..2099 at
// the real model's dim 2304). powf, sinf and cosf are the platform's: glibc's are numpy's on Linux; the
// mingw-w64 build's sinf / cosf are 1 ulp off glibc's for about 1% of the angles past the SIMD range, which
// only patch grids over 71476 patches long reach (its powf gave numpy's omegas for the dims checked).
//
// Both throw gsurg::Error on bad sizes (a side below 1, a table of another size, dim not a multiple of 4).
#pragma once

#include <vector>

namespace gsurg {
namespace minicpm_v2 {

// table: side * side rows of `channels` float32 values, row-major; returns [h * w, channels].
std::vector<float> resample_pos_table(const std::vector<float>& table, int side, int channels, int h, int w);

// Returns [h * w, dim] float32, row-major.
std::vector<float> sincos_2d(int dim, int h, int w);

// numpy's float32 sin and cos (>= 2, x86-64), as sincos_2d uses them; for tests.
float numpy_sinf(float x);
float numpy_cosf(float x);

// a * b + c rounded once to float32 (an exact fused multiply-add, whatever the platform's fmaf does).
float fma_f32(float a, float b, float c);

}  // namespace minicpm_v2
}  // namespace gsurg
