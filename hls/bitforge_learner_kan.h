// bitforge online KAN learner as HLS C++: predict, error, back-propagate and update, one sample per call.
//
// The arithmetic is bitforge's golden learner (bitforge.toolchain.learn.emulate.run, docs/learners.md), bit for
// bit; toolchain/backends/hls/learner.py emits a per-learner top function that calls these templates with the
// learner's sizes, types and initial state, and checks its C simulation against the golden trajectory.
//
// Values are ap_fixed types; products and sums are exact ap_fixed arithmetic (the accumulator types are sized
// by the emitter so that nothing rounds or wraps), and every rounding happens where the golden model rounds, by
// ap_fixed assignment (whose quantisation and overflow modes bitforge.toolchain.fixed reproduces, checked against
// these headers by tests/test_fixed_apfixed.py). The update's rounding works on the integer codes instead:
//   c -= round((2 g b) >> lr_shift)
// is the product of the codes g * b shifted right by D = frac(error) + frac(basis) - 1 - frac(storage) + lr_shift
// bits, rounded to nearest with ties to even, or floored after adding (w << D) >> RAND_BITS, w a word of the
// update lane's 32-bit LFSR (stochastic rounding); then a saturating subtract in the storage type.
//
// Coefficient memory: per layer, output o and input i, the G+k coefficients live in k+1 cyclic banks (bank j,
// address a holds coefficient p = a (k+1) + j), as in the RTL learner (toolchain/backends/rtl/learner_kan.py):
// the k+1 coefficients of a cell are always in k+1 different banks, one read and one write per bank per sample,
// so partitioning the bank dimension gives the tool one port per access for II 1.
//
// The MLP learner (bitforge_learner_mlp.h) includes this header for the shared helpers: codes, the update's
// rounding, the LFSR and the output error.
#ifndef BITFORGE_LEARNER_KAN_H_
#define BITFORGE_LEARNER_KAN_H_

#include <ap_fixed.h>
#include <ap_int.h>

namespace bitforge {

// -- codes: the integer behind a fixed-point value (value = code * 2^-frac) ----------------------------------

template <int W, int I, ap_q_mode Q, ap_o_mode O, int N>
inline ap_int<W> code_of(const ap_fixed<W, I, Q, O, N>& v) {
#pragma HLS INLINE
    ap_int<W> c;
    c.range(W - 1, 0) = v.range(W - 1, 0);
    return c;
}

template <int W, int I, ap_q_mode Q, ap_o_mode O, int N>
inline ap_int<W + 1> code_of(const ap_ufixed<W, I, Q, O, N>& v) {
#pragma HLS INLINE
    ap_uint<W> c;
    c.range(W - 1, 0) = v.range(W - 1, 0);
    return ap_int<W + 1>(c);
}

// The value of type T whose code is c (c must fit T: the low T::width bits are taken).
template <class T, int W, bool S>
inline T from_code(const ap_int_base<W, S>& c) {
#pragma HLS INLINE
    ap_int<T::width> bits = c;
    T v;
    v.range(T::width - 1, 0) = bits;
    return v;
}

// -- the update's rounding ------------------------------------------------------------------------------------

// p * 2^-D rounded: to nearest, ties to even (RND_CONV), or, stochastic, floor(p + ((w << D) >> RB)) >> D with
// w the lane's RB-bit random word; D <= 0 is an exact left shift (no rounding, w unused).
template <int PW, int D, int RB, bool POSITIVE = (D > 0)>
struct update_round;

template <int PW, int D, int RB>
struct update_round<PW, D, RB, true> {
    static const int IW = (PW > D + RB ? PW : D + RB) + 2;  // p + r without overflow, with D < IW
    static const int RW = PW + 2;                           // |result| <= |p| 2^-D + 1
    typedef ap_int<RW> result_t;

    static result_t nearest(const ap_int<PW>& p) {
#pragma HLS INLINE
        ap_int<IW> q = p;
        ap_int<IW> floor = q >> D;
        ap_uint<D> rem = q.range(D - 1, 0);
        ap_uint<D + 1> half = ap_uint<D + 1>(1) << (D - 1);
        bool up = rem > half || (rem == half && floor[0]);
        return result_t(floor + (up ? 1 : 0));
    }

    static result_t stochastic(const ap_int<PW>& p, const ap_uint<RB>& w) {
#pragma HLS INLINE
        ap_uint<D + RB> placed = w;
        placed <<= D;
        ap_uint<D + RB> r = placed >> RB;  // w at the top of the D discarded bits
        ap_int<IW> s = ap_int<IW>(p) + ap_int<IW>(r);
        return result_t(s >> D);
    }
};

template <int PW, int D, int RB>
struct update_round<PW, D, RB, false> {
    static const int RW = PW + 2 - D;
    typedef ap_int<RW> result_t;

    static result_t nearest(const ap_int<PW>& p) {
#pragma HLS INLINE
        return result_t(p) << (-D);
    }

    static result_t stochastic(const ap_int<PW>& p, const ap_uint<RB>&) {
#pragma HLS INLINE
        return result_t(p) << (-D);
    }
};

// stored - round(p 2^-D), saturated into the storage type S (its overflow mode: SAT or SAT_SYM).
template <class S, int PW, int D, int RB, bool STOCHASTIC>
inline S updated(const S& stored, const ap_int<PW>& p, const ap_uint<RB>& w) {
#pragma HLS INLINE
    typedef update_round<PW, D, RB> R;
    typename R::result_t delta = STOCHASTIC ? R::stochastic(p, w) : R::nearest(p);
    typedef ap_fixed<R::RW, R::RW - (S::width - S::iwidth), AP_TRN, AP_WRAP> delta_t;  // storage LSB
    return S(stored - from_code<delta_t>(delta));
}

// -- stochastic rounding's LFSR: 32-bit Fibonacci, shift left, new bit 0 = s31 ^ s21 ^ s1 ^ s0 ----------------

inline ap_uint<32> lfsr_step(const ap_uint<32>& s) {
#pragma HLS INLINE
    ap_uint<1> fresh = s[31] ^ s[21] ^ s[1] ^ s[0];
    ap_uint<32> next = s << 1;
    next[0] = fresh;
    return next;
}

// RB single steps: one XOR network per lane, every sample, learning or not.
template <int RB>
inline ap_uint<32> lfsr_leap(ap_uint<32> s) {
#pragma HLS INLINE
    for (int n = 0; n < RB; n++) {
#pragma HLS UNROLL
        s = lfsr_step(s);
    }
    return s;
}

template <int RB>
inline ap_uint<RB> lfsr_word(const ap_uint<32>& s) {
#pragma HLS INLINE
    return ap_uint<RB>(s.range(RB - 1, 0));
}

// -- the output error e = y_hat - t (exact difference, one rounding into the error type) ---------------------

template <class DATA, class ERR, int N_OUT>
inline void output_error(const DATA y[N_OUT], const DATA t[N_OUT], ERR e[N_OUT]) {
#pragma HLS INLINE
    for (int o = 0; o < N_OUT; o++) {
#pragma HLS UNROLL
        e[o] = ERR(y[o] - t[o]);
    }
}

// -- one KAN layer ----------------------------------------------------------------------------------------------
//
// CFG (emitted per layer) holds: n_in, n_out, grid_size, order, k1 = order + 1, depth (words per bank), u_bits,
// the index map (index_lo, index_mult, index_shift: s = ((x - index_lo) * index_mult) >> index_shift counts
// 2^-u_bits cells from the grid's low end), index_w (bits of that arithmetic), lr_d (the update's D), rand_bits,
// stochastic, need_grad (a hidden layer's input gradient), inv_h_mult (1/h = inv_h_mult * 2^-inv_h_frac), and the
// types x_t (input), data_t (output), coeff_t (multiplier operand), storage_t (memory), basis_t, dbasis_t
// (derivative weights), accum_t (exact sum), pd_t (exact sum_m c D_m), gs_t (exact sum_o g pd), error_t, inv_h_t.

template <class CFG>
struct kan_cache {
    typename CFG::storage_t stored[CFG::n_out][CFG::n_in][CFG::k1];  // bank order, pre-update
    typename CFG::coeff_t c[CFG::n_out][CFG::n_in][CFG::k1];
    typename CFG::basis_t b[CFG::n_in][CFG::k1];  // basis weight of the coefficient in bank j
    ap_uint<CFG::u_bits + 1> u[CFG::n_in];
    ap_uint<CFG::addr_w> addr[CFG::n_in][CFG::k1];
    ap_uint<CFG::slot_w> slot[CFG::n_in][CFG::k1];  // m: bank j holds coefficient cell + m
    bool in_range[CFG::n_in];
};

// Cell, local coordinate and the position's range check of one input code (clamped into the grid).
template <class CFG>
inline void kan_index(const typename CFG::x_t& x, ap_uint<CFG::cell_w>& cell, ap_uint<CFG::u_bits + 1>& u,
                      bool& in_range) {
#pragma HLS INLINE
    typedef ap_int<CFG::index_w> index_t;
    const index_t top = (index_t(CFG::grid_size) << CFG::u_bits) - 1;
    index_t offset = index_t(code_of(x)) - index_t(CFG::index_lo);
    index_t scaled = offset * index_t(CFG::index_mult);
    index_t raw = scaled >> CFG::index_shift;
    in_range = raw >= 0 && raw <= top;
    index_t s = raw < 0 ? index_t(0) : (raw > top ? top : raw);
    cell = s >> CFG::u_bits;
    u = s & ((index_t(1) << CFG::u_bits) - 1);
}

template <class CFG>
void kan_forward(const typename CFG::x_t x[CFG::n_in], typename CFG::data_t y[CFG::n_out], kan_cache<CFG>& cache,
                 typename CFG::storage_t coeffs[CFG::n_out][CFG::n_in][CFG::k1][CFG::depth],
                 const typename CFG::basis_t table[1 << CFG::u_bits][CFG::k1]) {
#pragma HLS INLINE
    for (int i = 0; i < CFG::n_in; i++) {
#pragma HLS UNROLL
        ap_uint<CFG::cell_w> cell;
        kan_index<CFG>(x[i], cell, cache.u[i], cache.in_range[i]);
        const int rot = cell % CFG::k1;  // the bank that holds coefficient `cell`
        const int base = cell / CFG::k1;
        for (int j = 0; j < CFG::k1; j++) {
#pragma HLS UNROLL
            const int m = j >= rot ? j - rot : j + CFG::k1 - rot;
            cache.slot[i][j] = m;
            cache.addr[i][j] = base + (j < rot ? 1 : 0);
            cache.b[i][j] = table[cache.u[i]][m];
        }
    }
    for (int o = 0; o < CFG::n_out; o++) {
#pragma HLS UNROLL
        typename CFG::accum_t acc = 0;
        for (int i = 0; i < CFG::n_in; i++) {
#pragma HLS UNROLL
            for (int j = 0; j < CFG::k1; j++) {
#pragma HLS UNROLL
                typename CFG::storage_t s = coeffs[o][i][j][cache.addr[i][j]];
                typename CFG::coeff_t c = s;  // the guard bits are not wired to the multiplier
                cache.stored[o][i][j] = s;
                cache.c[o][i][j] = c;
                acc += c * cache.b[i][j];
            }
        }
        y[o] = typename CFG::data_t(acc);
    }
}

// Back-propagation (hidden layers: gx = (1/h) sum_o g_o sum_m c_m D_m(u) with the pre-update coefficients, zero
// where the input was clamped) and the sparse update of the k+1 active coefficients of every edge.
template <class CFG>
void kan_backward(const kan_cache<CFG>& cache, const typename CFG::error_t g[CFG::n_out],
                  typename CFG::error_t gx[CFG::n_in], bool learn,
                  typename CFG::storage_t coeffs[CFG::n_out][CFG::n_in][CFG::k1][CFG::depth],
                  ap_uint<32> lanes[CFG::n_out][CFG::n_in][CFG::k1],
                  const typename CFG::dbasis_t dtable[1 << CFG::u_bits][CFG::k1]) {
#pragma HLS INLINE
    if (CFG::need_grad) {
        typename CFG::inv_h_t inv_h;
        inv_h.range(CFG::inv_h_t::width - 1, 0) = ap_uint<CFG::inv_h_t::width>(CFG::inv_h_mult);
        for (int i = 0; i < CFG::n_in; i++) {
#pragma HLS UNROLL
            typename CFG::gs_t s = 0;
            for (int o = 0; o < CFG::n_out; o++) {
#pragma HLS UNROLL
                typename CFG::pd_t pd = 0;
                for (int j = 0; j < CFG::k1; j++) {
#pragma HLS UNROLL
                    pd += cache.c[o][i][j] * dtable[cache.u[i]][cache.slot[i][j]];
                }
                s += g[o] * pd;
            }
            gx[i] = cache.in_range[i] ? typename CFG::error_t(s * inv_h) : typename CFG::error_t(0);
        }
    }
    for (int o = 0; o < CFG::n_out; o++) {
#pragma HLS UNROLL
        for (int i = 0; i < CFG::n_in; i++) {
#pragma HLS UNROLL
            for (int j = 0; j < CFG::k1; j++) {
#pragma HLS UNROLL
                const int PW = CFG::error_t::width + CFG::basis_t::width + 1;
                ap_int<PW> p = ap_int<PW>(code_of(g[o])) * ap_int<PW>(code_of(cache.b[i][j]));
                ap_uint<CFG::rand_bits> w = lfsr_word<CFG::rand_bits>(lanes[o][i][cache.slot[i][j]]);
                typename CFG::storage_t next = updated<typename CFG::storage_t, PW, CFG::lr_d, CFG::rand_bits,
                                                       CFG::stochastic>(cache.stored[o][i][j], p, w);
                if (learn) coeffs[o][i][j][cache.addr[i][j]] = next;
            }
        }
    }
}

template <class CFG>
inline void kan_lfsr_leap(ap_uint<32> lanes[CFG::n_out][CFG::n_in][CFG::k1]) {
#pragma HLS INLINE
    for (int o = 0; o < CFG::n_out; o++)
        for (int i = 0; i < CFG::n_in; i++)
            for (int m = 0; m < CFG::k1; m++) {
#pragma HLS UNROLL
                lanes[o][i][m] = lfsr_leap<CFG::rand_bits>(lanes[o][i][m]);
            }
}

}  // namespace bitforge

#endif  // BITFORGE_LEARNER_KAN_H_
