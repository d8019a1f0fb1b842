// bitforge HLS extension layer: the fixed-point KAN layer (package data of bitforge.hls).
//
// The IR's KANLayer rule (docs/ir.md), on the golden model's integer codes (toolchain/emulate.py kan_fixed):
// per input, s = ((x - index_lo) * index_mult) >> index_shift (floor), clamped to [0, G 2^u_bits - 1];
// cell = s >> u_bits, u = s & (2^u_bits - 1); the k+1 basis weights are row u of the basis ROM, which is the
// golden model's own table (bspline.basis_table, for either basis_impl: the table IS the function, so the bits
// agree by construction); y_o = sum_i sum_m c[o][i][cell_i + m] * basis[u_i][m] exactly, then the accumulator
// type's overflow, then requantization to the output type.
#ifndef BITFORGE_KAN_H_
#define BITFORGE_KAN_H_

#include "bitforge_common.h"

namespace bitforge {

// CONFIG_T: n_in, n_out, grid_size (G), order (k), n_basis (G + k), u_bits, index_lo, index_mult, index_shift,
// s_width (holds (x - index_lo) * index_mult), acc_frac (frac(coeff) + frac(basis)), acc_width (holds every partial
// sum's code exactly), coeff_t, basis_t, accum_t (the IR's accumulator type, at acc_frac).
template <class data_T, class res_T, typename CONFIG_T>
void kan_layer(const data_T x[CONFIG_T::n_in], res_T y[CONFIG_T::n_out],
               const typename CONFIG_T::coeff_t coeffs[CONFIG_T::n_out * CONFIG_T::n_in * CONFIG_T::n_basis],
               const typename CONFIG_T::basis_t basis[(1 << CONFIG_T::u_bits) * (CONFIG_T::order + 1)]) {
    #pragma HLS PIPELINE
    #pragma HLS ARRAY_PARTITION variable=coeffs complete
    int cell[CONFIG_T::n_in];
    int u[CONFIG_T::n_in];
    #pragma HLS ARRAY_PARTITION variable=cell complete
    #pragma HLS ARRAY_PARTITION variable=u complete
    const int s_max = (CONFIG_T::grid_size << CONFIG_T::u_bits) - 1;
    for (int i = 0; i < CONFIG_T::n_in; i++) {
        #pragma HLS UNROLL
        ap_int<CONFIG_T::s_width> s = code_of(x[i]) - ap_int<CONFIG_T::s_width>(CONFIG_T::index_lo);
        s *= CONFIG_T::index_mult;
        s >>= CONFIG_T::index_shift; // arithmetic shift: floor
        const int sc = s < 0 ? 0 : (s > s_max ? s_max : s.to_int());
        cell[i] = sc >> CONFIG_T::u_bits;
        u[i] = sc & ((1 << CONFIG_T::u_bits) - 1);
    }
    for (int o = 0; o < CONFIG_T::n_out; o++) {
        #pragma HLS UNROLL
        ap_int<CONFIG_T::acc_width> acc = 0;
        for (int i = 0; i < CONFIG_T::n_in; i++) {
            #pragma HLS UNROLL
            for (int m = 0; m <= CONFIG_T::order; m++) {
                #pragma HLS UNROLL
                acc += code_of(coeffs[(o * CONFIG_T::n_in + i) * CONFIG_T::n_basis + cell[i] + m]) *
                       code_of(basis[u[i] * (CONFIG_T::order + 1) + m]); // exact
            }
        }
        // the IR accumulator's overflow on the final sum, then the output's rounding and overflow
        const typename CONFIG_T::accum_t a = from_code<typename CONFIG_T::accum_t, CONFIG_T::acc_frac>(acc);
        y[o] = from_code<res_T, CONFIG_T::acc_frac>(code_of(a));
    }
}

} // namespace bitforge

#endif
