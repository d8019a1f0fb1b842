// bitforge HLS extension layers: the IR ops whose hls4ml counterpart computes different bits (package data of
// bitforge.hls, registered with hls4ml by bitforge.toolchain.backends.hls.extensions).
//
// Each function is the rule of one op in docs/ir.md, on the same integer codes as the golden model
// (toolchain/emulate.py): floor shifts, clamps, exact products and sums, one requantization by assignment to the
// output type. Tensors are the IR's per-sample layout flattened in C order, channels first ((C,), (C, L) or
// (C, H, W)); io_parallel only. The CONFIG_T structs are written by the extension layer's config template with
// every width already computed in Python, so no intermediate can overflow unless the IR says it does
// (an accumulator type's own overflow mode).
//
// Every comparison, product and sum is on codes (ap_int), and every requantization goes through from_code
// (bitforge_common.h), which also covers types with I < 0 or I > W and results rounded away entirely.
//
// Pragmas target a fully parallel, II=1 design (hls4ml's io_parallel Latency strategy): loops unrolled, small
// arrays partitioned. Lookup tables stay ROMs (the tool replicates them for parallel reads).
#ifndef BITFORGE_OPS_H_
#define BITFORGE_OPS_H_

#include "bitforge_common.h"

namespace bitforge {

// -- Table: y = table[clamp((x - index_lo) >> index_shift, 0, table_size - 1)] (table holds output codes) ----
// CONFIG_T: n_in, table_size, index_lo, index_shift, diff_width (holds x - index_lo), table_t (= res_T).
template <class data_T, class res_T, typename CONFIG_T>
void table(const data_T x[CONFIG_T::n_in], res_T y[CONFIG_T::n_in],
           const typename CONFIG_T::table_t values[CONFIG_T::table_size]) {
    #pragma HLS PIPELINE
    for (int i = 0; i < CONFIG_T::n_in; i++) {
        #pragma HLS UNROLL
        ap_int<CONFIG_T::diff_width> d = code_of(x[i]) - ap_int<CONFIG_T::diff_width>(CONFIG_T::index_lo);
        d >>= CONFIG_T::index_shift; // arithmetic shift: floor
        int idx = d < 0 ? 0 : (d > CONFIG_T::table_size - 1 ? CONFIG_T::table_size - 1 : d.to_int());
        y[i] = values[idx];
    }
}

// -- Softmax over the last axis, with the IR node's two tables -------------------------------------------------
// d = max - x; e = exp_table[min(d >> exp_shift, exp_size - 1)]; S = sum e (exact);
// r = recip_table[clamp((S - recip_lo) >> recip_shift, 0, recip_size - 1)]; y = e * r requantized from
// frac(exp) + frac(recip).
// CONFIG_T: n_rows, n_cols, in_width, exp_size, exp_shift, recip_size, recip_lo, recip_shift, sum_width (holds S
// and S - recip_lo), prod_frac, prod_width (holds e * r), exp_t, recip_t.
template <class data_T, class res_T, typename CONFIG_T>
void softmax(const data_T x[CONFIG_T::n_rows * CONFIG_T::n_cols], res_T y[CONFIG_T::n_rows * CONFIG_T::n_cols],
             const typename CONFIG_T::exp_t exp_table[CONFIG_T::exp_size],
             const typename CONFIG_T::recip_t recip_table[CONFIG_T::recip_size]) {
    #pragma HLS PIPELINE
    for (int r = 0; r < CONFIG_T::n_rows; r++) {
        #pragma HLS UNROLL
        const int base = r * CONFIG_T::n_cols;
        ap_int<CONFIG_T::in_width + 1> m = code_of(x[base]);
        for (int c = 1; c < CONFIG_T::n_cols; c++) {
            #pragma HLS UNROLL
            if (code_of(x[base + c]) > m) m = code_of(x[base + c]);
        }
        typename CONFIG_T::exp_t e[CONFIG_T::n_cols];
        #pragma HLS ARRAY_PARTITION variable=e complete
        ap_int<CONFIG_T::sum_width> s = 0;
        for (int c = 0; c < CONFIG_T::n_cols; c++) {
            #pragma HLS UNROLL
            ap_int<CONFIG_T::in_width + 2> d = m - code_of(x[base + c]); // >= 0
            d >>= CONFIG_T::exp_shift;
            const int idx = d > CONFIG_T::exp_size - 1 ? CONFIG_T::exp_size - 1 : d.to_int();
            e[c] = exp_table[idx];
            s += code_of(e[c]);
        }
        s -= ap_int<CONFIG_T::sum_width>(CONFIG_T::recip_lo);
        s >>= CONFIG_T::recip_shift; // arithmetic shift: floor
        const int ridx = s < 0 ? 0 : (s > CONFIG_T::recip_size - 1 ? CONFIG_T::recip_size - 1 : s.to_int());
        const typename CONFIG_T::recip_t rcp = recip_table[ridx];
        for (int c = 0; c < CONFIG_T::n_cols; c++) {
            #pragma HLS UNROLL
            ap_int<CONFIG_T::prod_width> p = code_of(e[c]) * code_of(rcp); // exact
            y[base + c] = from_code<res_T, CONFIG_T::prod_frac>(p);
        }
    }
}

// -- ArgMax over the last axis: the index of the largest element, the first one on ties ----------------------
// CONFIG_T: n_rows, n_cols, in_width.
template <class data_T, class res_T, typename CONFIG_T>
void argmax(const data_T x[CONFIG_T::n_rows * CONFIG_T::n_cols], res_T y[CONFIG_T::n_rows]) {
    #pragma HLS PIPELINE
    for (int r = 0; r < CONFIG_T::n_rows; r++) {
        #pragma HLS UNROLL
        const int base = r * CONFIG_T::n_cols;
        ap_int<CONFIG_T::in_width + 1> m = code_of(x[base]);
        int best = 0;
        for (int c = 1; c < CONFIG_T::n_cols; c++) {
            #pragma HLS UNROLL
            if (code_of(x[base + c]) > m) { // strictly larger: a tie keeps the first
                m = code_of(x[base + c]);
                best = c;
            }
        }
        y[r] = best; // an integer type (validate: frac 0, holds n_cols - 1)
    }
}

// -- Clip: clamp the code to [lo, hi] (lo first, then hi, as the golden model), then requantize ----------------
// CONFIG_T: n_in, has_lo, lo, has_hi, hi (codes of the input type), code_width, in_frac.
template <class data_T, class res_T, typename CONFIG_T>
void clip(const data_T x[CONFIG_T::n_in], res_T y[CONFIG_T::n_in]) {
    #pragma HLS PIPELINE
    for (int i = 0; i < CONFIG_T::n_in; i++) {
        #pragma HLS UNROLL
        ap_int<CONFIG_T::code_width> c = code_of(x[i]);
        if (CONFIG_T::has_lo && c < ap_int<CONFIG_T::code_width>(CONFIG_T::lo)) c = CONFIG_T::lo;
        if (CONFIG_T::has_hi && c > ap_int<CONFIG_T::code_width>(CONFIG_T::hi)) c = CONFIG_T::hi;
        y[i] = from_code<res_T, CONFIG_T::in_frac>(c);
    }
}

// -- HardSigmoid / HardSwish ---------------------------------------------------------------------------------
// t = x * alpha_code + beta_code * 2^in_frac at frac F = in_frac + frac(alpha), clamped to [0, 2^F];
// HardSigmoid: t requantized from F; HardSwish (swish): x * t requantized from in_frac + F.
// CONFIG_T: n_in, alpha_code, beta_code, in_frac, t_frac (F), t_width, swish, p_width (holds x * t).
template <class data_T, class res_T, typename CONFIG_T>
void hard_sigmoid(const data_T x[CONFIG_T::n_in], res_T y[CONFIG_T::n_in]) {
    #pragma HLS PIPELINE
    const ap_int<CONFIG_T::t_width> one = ap_int<CONFIG_T::t_width>(1) << CONFIG_T::t_frac;
    const ap_int<CONFIG_T::t_width> beta = ap_int<CONFIG_T::t_width>(CONFIG_T::beta_code) << CONFIG_T::in_frac;
    for (int i = 0; i < CONFIG_T::n_in; i++) {
        #pragma HLS UNROLL
        ap_int<CONFIG_T::t_width> t = code_of(x[i]) * ap_int<CONFIG_T::t_width>(CONFIG_T::alpha_code) + beta;
        if (t < 0) t = 0;
        if (t > one) t = one;
        if (CONFIG_T::swish) {
            ap_int<CONFIG_T::p_width> p = code_of(x[i]) * t;
            y[i] = from_code<res_T, CONFIG_T::in_frac + CONFIG_T::t_frac>(p);
        } else {
            y[i] = from_code<res_T, CONFIG_T::t_frac>(t);
        }
    }
}

// -- LeakyReLU / PReLU: x where x >= 0, else x * alpha[channel] (one slope, or one per channel) ---------------
// Both branches at frac in_frac + alpha_frac, then requantized.
// CONFIG_T: n_in, n_alpha (1 or the channels), inner (elements per channel), in_frac, alpha_frac, p_width, alpha_t.
template <class data_T, class res_T, typename CONFIG_T>
void leaky_relu(const data_T x[CONFIG_T::n_in], res_T y[CONFIG_T::n_in],
                const typename CONFIG_T::alpha_t alpha[CONFIG_T::n_alpha]) {
    #pragma HLS PIPELINE
    #pragma HLS ARRAY_PARTITION variable=alpha complete
    for (int i = 0; i < CONFIG_T::n_in; i++) {
        #pragma HLS UNROLL
        const int ch = CONFIG_T::n_alpha == 1 ? 0 : i / CONFIG_T::inner;
        ap_int<CONFIG_T::p_width> p = code_of(x[i]);
        if (p >= 0) {
            p <<= CONFIG_T::alpha_frac;
        } else {
            p *= code_of(alpha[ch]);
        }
        y[i] = from_code<res_T, CONFIG_T::in_frac + CONFIG_T::alpha_frac>(p);
    }
}

// -- ScaleShift: x * scale[c] + shift[c] exact, the accumulator's overflow, requantize ------------------------
// CONFIG_T: n_in, n_chan, inner, acc_frac (frac(x) + frac(scale)), shift_align (acc_frac - frac(shift)),
// p_width, scale_t, shift_t, accum_t (the IR's accumulator type, at acc_frac).
template <class data_T, class res_T, typename CONFIG_T>
void scale_shift(const data_T x[CONFIG_T::n_in], res_T y[CONFIG_T::n_in],
                 const typename CONFIG_T::scale_t scale[CONFIG_T::n_chan],
                 const typename CONFIG_T::shift_t shift[CONFIG_T::n_chan]) {
    #pragma HLS PIPELINE
    #pragma HLS ARRAY_PARTITION variable=scale complete
    #pragma HLS ARRAY_PARTITION variable=shift complete
    for (int i = 0; i < CONFIG_T::n_in; i++) {
        #pragma HLS UNROLL
        const int c = i / CONFIG_T::inner;
        ap_int<CONFIG_T::p_width> b = code_of(shift[c]);
        b <<= CONFIG_T::shift_align;
        ap_int<CONFIG_T::p_width> p = code_of(x[i]) * code_of(scale[c]);
        p += b; // exact
        const typename CONFIG_T::accum_t acc = from_code<typename CONFIG_T::accum_t, CONFIG_T::acc_frac>(p);
        y[i] = from_code<res_T, CONFIG_T::acc_frac>(code_of(acc));
    }
}

// -- Pool over 2-D windows (a 1-D pool is H = 1), per channel --------------------------------------------------
// max: the largest element of the window (padding ignored; every window has a real element), requantized.
// avg: the exact sum (padding reads 0) times R_n = round(2^recip_frac / n), ties to even, n the whole kernel
// (count_include_pad) or the window's real elements; requantized from in_frac + recip_frac.
// CONFIG_T: n_chan, in_h, in_w, out_h, out_w, kern_h, kern_w, stride_h, stride_w, pad_top, pad_left, is_max,
// count_include_pad, recip_frac, in_width, in_frac, sum_width, prod_width.
template <typename CONFIG_T> ap_uint<34> pool_reciprocal(int n) {
    #pragma HLS INLINE
    const unsigned long long num = 1ULL << CONFIG_T::recip_frac; // recip_frac <= 32 (validate)
    unsigned long long q = num / n, r = num % n;
    if (2 * r > (unsigned long long)n || (2 * r == (unsigned long long)n && (q & 1))) q++;
    return q;
}

template <class data_T, class res_T, typename CONFIG_T>
void pool(const data_T x[CONFIG_T::n_chan * CONFIG_T::in_h * CONFIG_T::in_w],
          res_T y[CONFIG_T::n_chan * CONFIG_T::out_h * CONFIG_T::out_w]) {
    #pragma HLS PIPELINE
    for (int c = 0; c < CONFIG_T::n_chan; c++) {
        #pragma HLS UNROLL
        for (int oh = 0; oh < CONFIG_T::out_h; oh++) {
            #pragma HLS UNROLL
            for (int ow = 0; ow < CONFIG_T::out_w; ow++) {
                #pragma HLS UNROLL
                ap_int<CONFIG_T::in_width + 1> m = 0;
                bool any = false;
                ap_int<CONFIG_T::sum_width> s = 0;
                int count = 0;
                for (int kh = 0; kh < CONFIG_T::kern_h; kh++) {
                    #pragma HLS UNROLL
                    for (int kw = 0; kw < CONFIG_T::kern_w; kw++) {
                        #pragma HLS UNROLL
                        const int ih = oh * CONFIG_T::stride_h - CONFIG_T::pad_top + kh;
                        const int iw = ow * CONFIG_T::stride_w - CONFIG_T::pad_left + kw;
                        if (ih < 0 || ih >= CONFIG_T::in_h || iw < 0 || iw >= CONFIG_T::in_w) continue; // padding
                        const int at = (c * CONFIG_T::in_h + ih) * CONFIG_T::in_w + iw;
                        const ap_int<CONFIG_T::in_width + 1> v = code_of(x[at]);
                        if (!any || v > m) m = v;
                        any = true;
                        s += v;
                        count++;
                    }
                }
                const int o = (c * CONFIG_T::out_h + oh) * CONFIG_T::out_w + ow;
                if (CONFIG_T::is_max) {
                    y[o] = from_code<res_T, CONFIG_T::in_frac>(m);
                } else {
                    const int n = CONFIG_T::count_include_pad ? CONFIG_T::kern_h * CONFIG_T::kern_w : count;
                    ap_int<CONFIG_T::prod_width> p = s * pool_reciprocal<CONFIG_T>(n);
                    y[o] = from_code<res_T, CONFIG_T::in_frac + CONFIG_T::recip_frac>(p);
                }
            }
        }
    }
}

} // namespace bitforge

#endif
