// bitforge online MLP learner as HLS C++ (the KAN learner's baseline): Dense + ReLU layers, predict, error,
// back-propagate and update every weight and bias, one sample per call, bit for bit the golden learner
// (bitforge.toolchain.learn.emulate.run; docs/learners.md).
//
// Forward: acc = sum_i w_i x_i + b (exact), one rounding into the datapath, ReLU between layers. Backward with
// the pre-update weights: g_x = round_error(W^T g), masked by the ReLU of the layer below (pre-activation > 0).
// Update: w -= round((2 g x) >> lr_shift), b -= round((2 g) >> lr_shift), rounded as in bitforge_learner_kan.h
// (nearest ties-to-even, or stochastic with one LFSR lane per weight and per bias), saturating in storage.
// Every parameter moves on every sample, so the whole network is the loop-carried dependency: the weights are
// registers (complete partitioning) and the tool must fit forward, backward and update into the initiation
// interval.
#ifndef BITFORGE_LEARNER_MLP_H_
#define BITFORGE_LEARNER_MLP_H_

#include "bitforge_learner_kan.h"  // codes, the update's rounding, the LFSR, the output error

namespace bitforge {

// CFG (emitted per layer) holds n_in, n_out, relu (a ReLU follows: every layer but the last), need_grad,
// lr_d (the bias update's D; a weight's is lr_d + frac(x)), x_frac, rand_bits, stochastic and the types x_t,
// data_t, coeff_t, storage_t, accum_t (exact sum), gs_t (exact sum_o g w), error_t.

template <class CFG>
struct dense_cache {
    typename CFG::x_t x[CFG::n_in];
    typename CFG::coeff_t w[CFG::n_out][CFG::n_in];  // pre-update, read type
    typename CFG::data_t z[CFG::n_out];              // pre-activation
};

template <class CFG>
void dense_forward(const typename CFG::x_t x[CFG::n_in], typename CFG::data_t h[CFG::n_out], dense_cache<CFG>& cache,
                   const typename CFG::storage_t weight[CFG::n_out][CFG::n_in],
                   const typename CFG::storage_t bias[CFG::n_out]) {
#pragma HLS INLINE
    for (int i = 0; i < CFG::n_in; i++) {
#pragma HLS UNROLL
        cache.x[i] = x[i];
    }
    for (int o = 0; o < CFG::n_out; o++) {
#pragma HLS UNROLL
        typename CFG::accum_t acc = typename CFG::coeff_t(bias[o]);
        for (int i = 0; i < CFG::n_in; i++) {
#pragma HLS UNROLL
            typename CFG::coeff_t w = weight[o][i];  // the guard bits are not wired to the multiplier
            cache.w[o][i] = w;
            acc += w * x[i];
        }
        typename CFG::data_t z = acc;
        cache.z[o] = z;
        h[o] = (CFG::relu && z < 0) ? typename CFG::data_t(0) : z;
    }
}

template <class CFG>
void dense_backward(const dense_cache<CFG>& cache, const typename CFG::error_t g_out[CFG::n_out],
                    typename CFG::error_t gx[CFG::n_in], bool learn,
                    typename CFG::storage_t weight[CFG::n_out][CFG::n_in],
                    typename CFG::storage_t bias[CFG::n_out], ap_uint<32> weight_lanes[CFG::n_out][CFG::n_in],
                    ap_uint<32> bias_lanes[CFG::n_out]) {
#pragma HLS INLINE
    typename CFG::error_t g[CFG::n_out];
    for (int o = 0; o < CFG::n_out; o++) {
#pragma HLS UNROLL
        g[o] = (CFG::relu && !(cache.z[o] > 0)) ? typename CFG::error_t(0) : g_out[o];
    }
    if (CFG::need_grad) {
        for (int i = 0; i < CFG::n_in; i++) {
#pragma HLS UNROLL
            typename CFG::gs_t s = 0;
            for (int o = 0; o < CFG::n_out; o++) {
#pragma HLS UNROLL
                s += g[o] * cache.w[o][i];
            }
            gx[i] = typename CFG::error_t(s);
        }
    }
    const int EW = CFG::error_t::width;
    const int PW = EW + CFG::x_t::width;
    for (int o = 0; o < CFG::n_out; o++) {
#pragma HLS UNROLL
        for (int i = 0; i < CFG::n_in; i++) {
#pragma HLS UNROLL
            ap_int<PW> p = ap_int<PW>(code_of(g[o])) * ap_int<PW>(code_of(cache.x[i]));
            typename CFG::storage_t next = updated<typename CFG::storage_t, PW, CFG::lr_d + CFG::x_frac,
                                                   CFG::rand_bits, CFG::stochastic>(
                weight[o][i], p, lfsr_word<CFG::rand_bits>(weight_lanes[o][i]));
            if (learn) weight[o][i] = next;
        }
        typename CFG::storage_t next = updated<typename CFG::storage_t, EW, CFG::lr_d, CFG::rand_bits,
                                               CFG::stochastic>(bias[o], code_of(g[o]),
                                                                lfsr_word<CFG::rand_bits>(bias_lanes[o]));
        if (learn) bias[o] = next;
    }
}

template <class CFG>
inline void dense_lfsr_leap(ap_uint<32> weight_lanes[CFG::n_out][CFG::n_in], ap_uint<32> bias_lanes[CFG::n_out]) {
#pragma HLS INLINE
    for (int o = 0; o < CFG::n_out; o++) {
#pragma HLS UNROLL
        for (int i = 0; i < CFG::n_in; i++) {
#pragma HLS UNROLL
            weight_lanes[o][i] = lfsr_leap<CFG::rand_bits>(weight_lanes[o][i]);
        }
        bias_lanes[o] = lfsr_leap<CFG::rand_bits>(bias_lanes[o]);
    }
}

}  // namespace bitforge

#endif  // BITFORGE_LEARNER_MLP_H_
