// bitforge HLS extension layers: the two conversions every layer uses (package data of bitforge.hls).
//
// bitforge's golden model (toolchain/emulate.py) computes on integer codes: a value of a fixed-point type is
// code * 2^-frac. The layers do the same: they read each input's code, compute exactly on ap_int codes (index
// arithmetic, products, sums, all with widths computed in Python so that nothing wraps), and requantize once,
// by assignment to the destination ap_fixed type, whose rounding and overflow modes are the IR type's
// (toolchain/fixed.py is tested against these headers).
#ifndef BITFORGE_COMMON_H_
#define BITFORGE_COMMON_H_

#include "ap_fixed.h"
#include "ap_int.h"

namespace bitforge {

// The code of a signed value, one bit wider than the type so that signed and unsigned types share one form.
template <int W, int I, ap_q_mode Q, ap_o_mode O, int N> ap_int<W + 1> code_of(const ap_fixed<W, I, Q, O, N> &x) {
    #pragma HLS INLINE
    ap_int<W> c;
    c.range(W - 1, 0) = x.range(W - 1, 0);
    return c;
}

// The code of an unsigned value (zero-extended).
template <int W, int I, ap_q_mode Q, ap_o_mode O, int N> ap_int<W + 1> code_of(const ap_ufixed<W, I, Q, O, N> &x) {
    #pragma HLS INLINE
    ap_uint<W> c;
    c.range(W - 1, 0) = x.range(W - 1, 0);
    return c;
}

// The fractional bits of an ap_fixed / ap_ufixed type.
template <class T> struct frac_of;
template <int W, int I, ap_q_mode Q, ap_o_mode O, int N> struct frac_of<ap_fixed<W, I, Q, O, N> > {
    static const int value = W - I;
};
template <int W, int I, ap_q_mode Q, ap_o_mode O, int N> struct frac_of<ap_ufixed<W, I, Q, O, N> > {
    static const int value = W - I;
};

// An ap_fixed that holds every W-bit code at frac F exactly, with 1 <= integer bits <= width, and wide enough
// that a conversion to a type with frac FD keeps at least one of its bits: the ap_fixed C simulation reads a bit
// beyond the source's MSB (an assertion that aborts the process) when it rounds away every bit of the source.
template <int W, int F, int FD> struct exact_holder {
    static const int frac = F > 0 ? F : 0;
    static const int i1 = W - F > 1 ? W - F : 1;
    static const int integer = i1 > 1 - FD ? i1 : 1 - FD;
    static const int width = integer + frac;
};

// Requantize: the exact value code * 2^-F assigned to res_T, which rounds with its rounding mode and then brings
// the result into range with its overflow mode (the golden model's fixed.requantize). Every requantization in
// the layers goes through here, from a holder as above.
template <class res_T, int F, int W> res_T from_code(const ap_int<W> &code) {
    #pragma HLS INLINE
    typedef exact_holder<W, F, frac_of<res_T>::value> H;
    ap_int<H::width> c = code;
    c <<= (H::frac - F);
    ap_fixed<H::width, H::integer> v;
    v.range(H::width - 1, 0) = c.range(H::width - 1, 0);
    res_T y = v;
    return y;
}

} // namespace bitforge

#endif
