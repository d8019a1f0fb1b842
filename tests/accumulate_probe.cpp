// Reference oracle for bitforge.toolchain.accumulate: runs hls4ml's own nnet::dense_latency
// (templates/vivado/nnet_utils/nnet_dense_latency.h, with the ap_fixed headers hls4ml ships) on codes
// read from stdin, so tests/test_accumulate.py can compare the IR's accumulation rule with it bit for bit.
//
// Types are template parameters, so the configurations are compiled in (CONFIGS below); weights, biases
// and inputs are run-time data. Each configuration runs dense_latency twice: once with res_t = accum_t
// (the accumulator itself) and once with its output type (the final requantize).
//
// Protocol (stdin -> stdout):
//   L                         -> one line per configuration: "k n_in n_out" then "END"
//   C k N  w... b... x...     -> codes: n_out*n_in weights in (out, in) order, n_out biases, N*n_in inputs;
//                                answers N lines of n_out accumulator then n_out output raw bit patterns
// Codes in are signed decimal integers (their low W bits are stored); answers are the W raw bits as unsigned
// decimals (the test sign-extends them with the type it knows).
#include "nnet_utils/nnet_dense_latency.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

template <int NIN, int NOUT, class W, class B, class A> struct config {
    typedef W weight_t;
    typedef B bias_t;
    typedef A accum_t;
    static const unsigned n_in = NIN;
    static const unsigned n_out = NOUT;
    static const unsigned io_type = nnet::io_parallel;
    static const unsigned strategy = nnet::latency;
    static const unsigned reuse_factor = 1;
    static const unsigned multiplier_limit = NIN * NOUT;
    static const bool store_weights_in_bram = false;
    static const unsigned n_zeros = 0;
    template <class x_T, class y_T> using product = nnet::product::mult<x_T, y_T>;
};

template <class T> static void set_code(T& v, long long code) {
    v.range(T::width - 1, 0) = (unsigned long long)code;  // the low W bits of the two's complement code
}

template <class T> static unsigned long long raw_bits(const T& v) { return v.range(T::width - 1, 0).to_uint64(); }

static long long next_code() {
    long long v;
    if (scanf("%lld", &v) != 1) {
        fprintf(stderr, "accumulate_probe: expected an integer code\n");
        exit(2);
    }
    return v;
}

template <class X, class W, class B, class A, class R, int NIN, int NOUT> static void run(long n) {
    typedef config<NIN, NOUT, W, B, A> cfg;
    static W weights[NIN * NOUT];
    static B biases[NOUT];
    for (int o = 0; o < NOUT; ++o)
        for (int i = 0; i < NIN; ++i) set_code(weights[i * NOUT + o], next_code());  // nnet's layout: (in, out)
    for (int o = 0; o < NOUT; ++o) set_code(biases[o], next_code());
    std::string out;
    for (long s = 0; s < n; ++s) {
        X x[NIN];
        A acc[NOUT];
        R res[NOUT];
        for (int i = 0; i < NIN; ++i) set_code(x[i], next_code());
        nnet::dense_latency<X, A, cfg>(x, acc, weights, biases);
        nnet::dense_latency<X, R, cfg>(x, res, weights, biases);
        char buf[64];
        for (int o = 0; o < NOUT; ++o) {
            snprintf(buf, sizeof buf, "%llu ", raw_bits(acc[o]));
            out += buf;
        }
        for (int o = 0; o < NOUT; ++o) {
            snprintf(buf, sizeof buf, o + 1 < NOUT ? "%llu " : "%llu\n", raw_bits(res[o]));
            out += buf;
        }
        if (out.size() > (1 << 16)) {
            fwrite(out.data(), 1, out.size(), stdout);
            out.clear();
        }
    }
    fwrite(out.data(), 1, out.size(), stdout);
}

// k, x type, weight type, bias type, accumulator type, output type, n_in, n_out. tests/test_accumulate.py
// holds the same table as bitforge types (CONFIGS); the L listing lets it check the sizes.
#define CONFIGS(X)                                                                                            \
    /* hls4ml's default: ap_fixed<16,6> everywhere. accum frac 10 < 20: every product truncated, WRAP */     \
    X(0, ap_fixed<16 COMMA 6>, ap_fixed<16 COMMA 6>, ap_fixed<16 COMMA 6>, ap_fixed<16 COMMA 6>,               \
      ap_fixed<16 COMMA 6>, 16, 8)                                                                             \
    /* RND products (frac 6 < 11) into a SAT accumulator of [-8, 8) that saturates mid-sum */               \
    X(1, ap_fixed<8 COMMA 3>, ap_fixed<8 COMMA 2>, ap_fixed<8 COMMA 3>,                                      \
      ap_fixed<10 COMMA 4 COMMA AP_RND COMMA AP_SAT>, ap_fixed<8 COMMA 4 COMMA AP_RND_CONV COMMA AP_SAT>, 12, 5) \
    /* exact products (frac 10 = 6 + 4), bias finer (frac 14) rounded RND_INF */                            \
    X(2, ap_fixed<10 COMMA 4>, ap_fixed<6 COMMA 2>, ap_fixed<16 COMMA 2>,                                    \
      ap_fixed<24 COMMA 14 COMMA AP_RND_INF COMMA AP_WRAP>, ap_fixed<10 COMMA 6 COMMA AP_RND COMMA AP_SAT>, 9, 6) \
    /* accumulator finer than the products (frac 16 > 8), unsigned inputs, SAT_SYM that acts */             \
    X(3, ap_ufixed<8 COMMA 4>, ap_fixed<6 COMMA 2>, ap_fixed<8 COMMA 5>,                                     \
      ap_fixed<22 COMMA 6 COMMA AP_TRN COMMA AP_SAT_SYM>, ap_fixed<12 COMMA 8 COMMA AP_RND_ZERO COMMA AP_SAT>, \
      10, 4)                                                                                                   \
    /* RND_MIN_INF products and bias (frac 7 < 16, < 9) into a SAT_ZERO accumulator */                      \
    X(4, ap_fixed<12 COMMA 4>, ap_fixed<9 COMMA 1>, ap_fixed<12 COMMA 3>,                                    \
      ap_fixed<12 COMMA 5 COMMA AP_RND_MIN_INF COMMA AP_SAT_ZERO>,                                           \
      ap_fixed<8 COMMA 3 COMMA AP_RND_CONV COMMA AP_SAT>, 7, 3)                                               \
    /* the exact sum: WRAP at frac(x) + frac(W), wide enough (what the precision pass infers) */            \
    X(5, ap_fixed<8 COMMA 3>, ap_fixed<8 COMMA 2>, ap_fixed<8 COMMA 3>, ap_fixed<24 COMMA 13>,                \
      ap_fixed<9 COMMA 4 COMMA AP_RND_CONV COMMA AP_SAT>, 20, 7)

#define COMMA ,
#define LIST(k, X, W, B, A, R, NIN, NOUT) printf("%d %d %d\n", k, NIN, NOUT);
#define DISPATCH(k, X, W, B, A, R, NIN, NOUT) \
    case k:                                   \
        run<X, W, B, A, R, NIN, NOUT>(n);     \
        break;

int main() {
    char cmd[8];
    while (scanf("%7s", cmd) == 1) {
        if (cmd[0] == 'L') {
            CONFIGS(LIST)
            printf("END\n");
        } else if (cmd[0] == 'C') {
            int k = (int)next_code();
            long n = (long)next_code();
            switch (k) {
                CONFIGS(DISPATCH)
            default:
                fprintf(stderr, "accumulate_probe: no configuration %d\n", k);
                return 2;
            }
        } else {
            fprintf(stderr, "accumulate_probe: unknown request '%s'\n", cmd);
            return 2;
        }
        fflush(stdout);
    }
    return 0;
}
