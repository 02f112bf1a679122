#pragma once
/// Portable dot products of one quantized weight row with one quantized activation row.
/// Integer sums inside a block are exact; blocks are added into one f32 sum, first to last.
#include <kernels/cpu/quant_blocks.hpp>

#include <cstdint>

namespace tf::kernels::cpu::portable {

/// Q4_0 weights . Q8_0 activations over `nb` blocks.
inline float dot_q4_0(const block_q4_0* w, const block_q8_0* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    int s = 0;
    for (int j = 0; j < 16; ++j)
      s += ((w[i].qs[j] & 0x0f) - 8) * x[i].qs[j] + ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + 16];
    acc += fp16_to_fp32(w[i].d) * fp16_to_fp32(x[i].d) * static_cast<float>(s);
  }
  return acc;
}

/// Q4_1 weights . Q8_1 activations: d_w d_x sum(q_w q_x) + m_w d_x sum(q_x) per block (the
/// exact integer sum, not the fp16-rounded s field).
inline float dot_q4_1(const block_q4_1* w, const block_q8_1* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    int s = 0, sx = 0;
    for (int j = 0; j < 16; ++j) {
      s += (w[i].qs[j] & 0x0f) * x[i].qs[j] + (w[i].qs[j] >> 4) * x[i].qs[j + 16];
      sx += x[i].qs[j] + x[i].qs[j + 16];
    }
    const float dx = fp16_to_fp32(x[i].d);
    acc += fp16_to_fp32(w[i].d) * dx * static_cast<float>(s) +
           fp16_to_fp32(w[i].m) * dx * static_cast<float>(sx);
  }
  return acc;
}

inline std::uint32_t load_qh(const std::uint8_t* qh) {
  return static_cast<std::uint32_t>(qh[0]) | (static_cast<std::uint32_t>(qh[1]) << 8) |
         (static_cast<std::uint32_t>(qh[2]) << 16) | (static_cast<std::uint32_t>(qh[3]) << 24);
}

/// Q5_0 weights . Q8_0 activations.
inline float dot_q5_0(const block_q5_0* w, const block_q8_0* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    const std::uint32_t qh = load_qh(w[i].qh);
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = ((w[i].qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4)) - 16;
      const int hi = ((w[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4)) - 16;
      s += lo * x[i].qs[j] + hi * x[i].qs[j + 16];
    }
    acc += fp16_to_fp32(w[i].d) * fp16_to_fp32(x[i].d) * static_cast<float>(s);
  }
  return acc;
}

/// Q5_1 weights . Q8_1 activations.
inline float dot_q5_1(const block_q5_1* w, const block_q8_1* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    const std::uint32_t qh = load_qh(w[i].qh);
    int s = 0, sx = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = (w[i].qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (w[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      s += lo * x[i].qs[j] + hi * x[i].qs[j + 16];
      sx += x[i].qs[j] + x[i].qs[j + 16];
    }
    const float dx = fp16_to_fp32(x[i].d);
    acc += fp16_to_fp32(w[i].d) * dx * static_cast<float>(s) +
           fp16_to_fp32(w[i].m) * dx * static_cast<float>(sx);
  }
  return acc;
}

/// Q8_0 weights . Q8_0 activations.
inline float dot_q8_0(const block_q8_0* w, const block_q8_0* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    int s = 0;
    for (int j = 0; j < qk32; ++j) s += w[i].qs[j] * x[i].qs[j];
    acc += fp16_to_fp32(w[i].d) * fp16_to_fp32(x[i].d) * static_cast<float>(s);
  }
  return acc;
}

/// Q8_1 weights . Q8_0 activations (the s field of the weights is not needed).
inline float dot_q8_1(const block_q8_1* w, const block_q8_0* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    int s = 0;
    for (int j = 0; j < qk32; ++j) s += w[i].qs[j] * x[i].qs[j];
    acc += fp16_to_fp32(w[i].d) * fp16_to_fp32(x[i].d) * static_cast<float>(s);
  }
  return acc;
}

/// Q2_K weights . Q8_K activations: d (sum sc q qx) - dmin (sum m bsum), per super-block.
inline float dot_q2_k(const block_q2_k* w, const block_q8_k* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    int sumi = 0, summ = 0;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) {
        const int e = g * 16 + l, half = e / 128, shift = 2 * ((e % 128) / 32);
        s += ((w[i].qs[half * 32 + e % 32] >> shift) & 3) * x[i].qs[e];
      }
      sumi += (w[i].scales[g] & 0x0f) * s;
      summ += (w[i].scales[g] >> 4) * x[i].bsums[g];
    }
    acc += x[i].d * (fp16_to_fp32(w[i].d) * static_cast<float>(sumi) -
                     fp16_to_fp32(w[i].dmin) * static_cast<float>(summ));
  }
  return acc;
}

/// Q3_K weights . Q8_K activations.
inline float dot_q3_k(const block_q3_k* w, const block_q8_k* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    int sumi = 0;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) {
        const int e = g * 16 + l, half = e / 128, j = (e % 128) / 32, k = e % 32;
        const int low = (w[i].qs[half * 32 + k] >> (2 * j)) & 3;
        const int hbit = (w[i].hmask[k] >> (half * 4 + j)) & 1;
        s += (low - (hbit ? 0 : 4)) * x[i].qs[e];
      }
      sumi += q3_k_scale(w[i].scales, g) * s;
    }
    acc += x[i].d * fp16_to_fp32(w[i].d) * static_cast<float>(sumi);
  }
  return acc;
}

/// Q4_K weights . Q8_K activations.
inline float dot_q4_k(const block_q4_k* w, const block_q8_k* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    int sumi = 0, summ = 0;
    for (int sub = 0; sub < 8; ++sub) {
      std::uint8_t sc = 0, m = 0;
      k_scale_min(w[i].scales, sub, sc, m);
      int s = 0;
      for (int l = 0; l < 32; ++l)
        s += ((w[i].qs[(sub / 2) * 32 + l] >> (4 * (sub % 2))) & 0x0f) * x[i].qs[sub * 32 + l];
      sumi += sc * s;
      summ += m * (x[i].bsums[2 * sub] + x[i].bsums[2 * sub + 1]);
    }
    acc += x[i].d * (fp16_to_fp32(w[i].d) * static_cast<float>(sumi) -
                     fp16_to_fp32(w[i].dmin) * static_cast<float>(summ));
  }
  return acc;
}

/// Q5_K weights . Q8_K activations.
inline float dot_q5_k(const block_q5_k* w, const block_q8_k* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    int sumi = 0, summ = 0;
    for (int sub = 0; sub < 8; ++sub) {
      std::uint8_t sc = 0, m = 0;
      k_scale_min(w[i].scales, sub, sc, m);
      int s = 0;
      for (int l = 0; l < 32; ++l) {
        const int q = ((w[i].qs[(sub / 2) * 32 + l] >> (4 * (sub % 2))) & 0x0f) |
                      (((w[i].qh[l] >> sub) & 1) << 4);
        s += q * x[i].qs[sub * 32 + l];
      }
      sumi += sc * s;
      summ += m * (x[i].bsums[2 * sub] + x[i].bsums[2 * sub + 1]);
    }
    acc += x[i].d * (fp16_to_fp32(w[i].d) * static_cast<float>(sumi) -
                     fp16_to_fp32(w[i].dmin) * static_cast<float>(summ));
  }
  return acc;
}

/// Q6_K weights . Q8_K activations.
inline float dot_q6_k(const block_q6_k* w, const block_q8_k* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    int sumi = 0;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) {
        const int e = g * 16 + l, half = e / 128, r = e % 128;
        const int lo = (w[i].ql[half * 64 + r % 64] >> (4 * (r / 64))) & 0x0f;
        const int hi = (w[i].qh[half * 32 + r % 32] >> (2 * (r / 32))) & 3;
        s += ((lo | (hi << 4)) - 32) * x[i].qs[e];
      }
      sumi += w[i].scales[g] * s;
    }
    acc += x[i].d * fp16_to_fp32(w[i].d) * static_cast<float>(sumi);
  }
  return acc;
}

/// Q8_K weights . Q8_K activations.
inline float dot_q8_k(const block_q8_k* w, const block_q8_k* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    int s = 0;
    for (int j = 0; j < qk256; ++j) s += w[i].qs[j] * x[i].qs[j];
    acc += w[i].d * x[i].d * static_cast<float>(s);
  }
  return acc;
}

/// f32 weights . f32 activations, in 8 interleaved partial sums added pairwise at the end.
inline float dot_f32(const float* w, const float* x, std::int64_t n) {
  float p[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) p[j] += w[i + j] * x[i + j];
  for (int j = 0; i < n; ++i, ++j) p[j] += w[i] * x[i];
  return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

/// f16 weights (raw bits) . f32 activations, same order as dot_f32.
inline float dot_f16(const std::uint16_t* w, const float* x, std::int64_t n) {
  float p[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) p[j] += fp16_to_fp32(w[i + j]) * x[i + j];
  for (int j = 0; i < n; ++i, ++j) p[j] += fp16_to_fp32(w[i]) * x[i];
  return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

/// bf16 weights (raw bits) . f32 activations, same order as dot_f32.
inline float dot_bf16(const std::uint16_t* w, const float* x, std::int64_t n) {
  float p[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) p[j] += bf16_to_fp32(w[i + j]) * x[i + j];
  for (int j = 0; i < n; ++i, ++j) p[j] += bf16_to_fp32(w[i]) * x[i];
  return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

}  // namespace tf::kernels::cpu::portable
